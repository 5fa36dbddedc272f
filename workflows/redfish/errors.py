"""What a Redfish call can fail with: each error names the node and the call."""


class RedfishError(Exception):
    def __init__(self, node: str, call: str, message: str):
        super().__init__(f"{node}: {call}: {message}")
        self.node = node
        self.call = call


class BMCTransientError(RedfishError):
    """The BMC did not answer usefully now; the same call may succeed later."""

    def __init__(self, node: str, call: str, message: str, retry_after: str | None = None):
        super().__init__(node, call, message)
        self.retry_after = retry_after  # the BMC's Retry-After header, read when waiting to retry


class BMCPermanentError(RedfishError):
    """The BMC refused the call; repeating it will not help."""
