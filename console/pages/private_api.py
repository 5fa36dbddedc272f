"""The private listener's fleet reads: the shared API views behind the policy of
console/pages/viewers.py. An anonymous caller is a 401; an operator reads every node as it is;
a signed-in tenant reads quarantine reasons as the public listener shows them, its own names
left in. The answers keep the shapes and schema names of the public listener's.
"""

from console.pages.public_api import DisclosedNodeSerializer
from console.pages.viewers import DisclosedAPIView
from fleet.api.views import NodeDetailView, NodeListView
from remediation.api.views import RemediationListView


class SignedInNodeListView(DisclosedAPIView, NodeListView):
    __doc__ = NodeListView.__doc__
    serializer_class = DisclosedNodeSerializer


class SignedInNodeDetailView(DisclosedAPIView, NodeDetailView):
    __doc__ = NodeDetailView.__doc__
    serializer_class = DisclosedNodeSerializer


class SignedInRemediationListView(DisclosedAPIView, RemediationListView):
    __doc__ = RemediationListView.__doc__
