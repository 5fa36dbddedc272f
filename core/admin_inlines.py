"""Admin inlines of rows that only grow (a reservation's history, a webhook's deliveries, a
rollout's nodes): a page of them at a time, so that a change page never loads thousands of rows.
Each inline pages on a query parameter of its own, `<prefix>-page`, so two on one page page apart."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.core.paginator import Page, Paginator
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest

if TYPE_CHECKING:
    _AnyTabularInline = admin.TabularInline[Any, Any]
    _AnyInlineFormSet = BaseInlineFormSet[Any, Any, Any]
else:  # Django's inlines and formsets take no type arguments at run time
    _AnyTabularInline = admin.TabularInline
    _AnyInlineFormSet = BaseInlineFormSet


class PageOfRows(_AnyInlineFormSet):
    """The formset of one page of the inline's rows, in the inline's order."""

    request: HttpRequest
    per_page: int
    page: Page[Any]

    def get_queryset(self) -> Any:
        if not hasattr(self, "page"):
            rows = super().get_queryset()
            self.page = Paginator(rows, self.per_page).get_page(self.request.GET.get(self.page_parameter))
            self._queryset = self.page.object_list
        return self._queryset

    @property
    def page_parameter(self) -> str:
        return f"{self.prefix}-page"

    def page_links(self) -> list[tuple[str, str]]:
        """(label, URL) of the first, previous, next and last pages, those there are; the URL keeps
        the request's other parameters (the changelist's filters, the other inlines' pages)."""
        self.get_queryset()
        page, last = self.page, self.page.paginator.num_pages
        wanted = [("first", 1, page.number > 1)]
        wanted += [("previous", page.number - 1, page.has_previous())]
        wanted += [("next", page.number + 1, page.has_next()), ("last", last, page.number < last)]
        return [(label, self._url(number)) for label, number, shown in wanted if shown]

    def _url(self, number: int) -> str:
        parameters = self.request.GET.copy()
        parameters[self.page_parameter] = str(number)
        return f"?{parameters.urlencode()}"


class PaginatedInline(_AnyTabularInline):
    """A tabular inline that shows `per_page` rows at a time, with links to the other pages."""

    formset = PageOfRows
    template = "admin/edit_inline/paginated_tabular.html"
    per_page = 50
    extra = 0

    def get_formset(self, request: HttpRequest, obj: Any = None, **kwargs: Any) -> Any:
        formset = super().get_formset(request, obj, **kwargs)
        return type(formset.__name__, (formset,), {"request": request, "per_page": self.per_page})
