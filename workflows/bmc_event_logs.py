"""Reading the BMCs' system event logs (SEL) for new entries: a fault source beside the node agents
and Prometheus. What an entry calls for is remediation's to decide (rules.sel_entry: critical
hardware events quarantine, warnings are recorded), under the same cap and audit as every alert.

Each node whose BMC the control plane drives (every state past `enrolled`) has a cursor in the
database (remediation.models.BMCEventLogCursor): where its SEL's entries are, the newest entry read
(its Id and Created, which together name it even in a log whose Ids start again), that entry's place
in the log, and the log's ETag. A read is then usually one request, for the page that starts at the
cursor's entry, with If-None-Match:

- 304: nothing was logged since;
- a page that begins with the cursor's entry: what follows it is new (the pages after it too);
- anything else (the log wrapped when full, was cleared, or its Ids started again): the log is read
  back from its end to the cursor's entry, or to its start if the entry is gone: a cleared log is
  read whole.

Redfish lists a log's entries oldest first, as bmcsim and OpenBMC do. A node's first read takes the
log as it stands as history and acts on what is logged after: a BMC keeps years of events, long dealt
with. An entry read twice (a cursor lost, a worker killed before it moved the cursor) is recorded
once: its record's key is the node, the entry's Id and its Created.

The beat sends the sweep every reconcile period to the workers' queue: a BMC that hangs must not
hold the reconcilers. The sweep claims the cursors that are due (each every SEL_POLL_SECONDS) and
reads their BMCs SEL_READ_CONCURRENCY at a time, in threads that touch no database, one attempt of
at most BMC_TIMEOUT a request: a BMC that does not answer holds one thread, not the others, and is
read again when next due. What was read is acted on back in the sweep's own thread.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from django.conf import settings

from fleet.models import Node
from remediation import services
from remediation.models import BMCEventLogCursor
from workflows.clients import bmc_client
from workflows.redfish import BMCPermanentError, LogEntries, RedfishClient, RedfishError, read_each

PAGE = 100  # entries a request asks for ($top)


@dataclass(frozen=True)
class Cursor:
    """Where a node's next read starts: a BMCEventLogCursor's fields, for a thread with no database."""

    entries_path: str
    last_entry_id: str  # "" with no entry: the log was empty
    last_entry_created: str
    position: int  # the entry's place in the log, from 1; 0 with no entry
    etag: str

    def names(self, entry: dict) -> bool:
        return entry["Id"] == self.last_entry_id and entry.get("Created", "") == self.last_entry_created


@dataclass(frozen=True)
class Read:
    cursor: Cursor  # where the next read starts
    new_entries: list[dict]  # oldest first


def read_due(*, limit: int) -> dict:
    """Read the BMC event logs that are due, and act on their new entries."""
    due = BMCEventLogCursor.objects.filter(pk__in=services.take_due_event_logs(limit=limit)).select_related("node")
    outcome = {"read": 0, "failed": 0, "new_entries": 0}
    for row, read in read_each(
        due,
        lambda row: _read(row.node, _cursor_of(row), first=row.read_at is None),
        at_once=settings.SEL_READ_CONCURRENCY,
    ):
        if isinstance(read, RedfishError):
            services.event_log_unread(cursor_id=row.pk, failure=str(read))
            outcome["failed"] += 1
            continue
        services.receive_sel_entries(node=row.node, entries=read.new_entries)
        services.event_log_read(cursor_id=row.pk, **asdict(read.cursor))
        outcome["read"] += 1
        outcome["new_entries"] += len(read.new_entries)
    return outcome


def _cursor_of(row: BMCEventLogCursor) -> Cursor:
    return Cursor(row.entries_path, row.last_entry_id, row.last_entry_created, row.position, row.etag)


def _read(node: Node, cursor: Cursor, *, first: bool) -> Read:
    """One node's new entries, in a reader thread: its BMC, and no database."""
    bmc = bmc_client(node)
    bmc.attempts = 1  # the next period is the retry: a BMC that fails holds its thread once
    try:
        return read_new_entries(bmc, cursor, first=first)
    finally:
        bmc.close()


def read_new_entries(bmc: RedfishClient, cursor: Cursor, *, first: bool = False, page: int = PAGE) -> Read:
    """The entries logged since `cursor`, and the cursor after them; a `first` read only places the
    cursor at the newest entry. Requests ask for `page` entries at most."""
    path = cursor.entries_path or bmc.event_log_entries_path()
    if path is None:
        raise BMCPermanentError(bmc.access.node, "read the SEL", "the BMC has no LogService of LogEntryType SEL")
    if first:
        return Read(_at_newest(bmc, path), [])
    start = max(cursor.position - 1, 0)
    head = bmc.log_entries(path, skip=start, top=page, etag=cursor.etag)
    if head is None:
        return Read(replace(cursor, entries_path=path), [])
    if not cursor.last_entry_id:  # the log was empty: whatever it holds now is new
        new, position = _onwards(bmc, path, head, start, page)
    elif head.members and cursor.names(head.members[0]):
        held, position = _onwards(bmc, path, head, start, page)
        new = held[1:]
    else:
        new, position = _back_to(cursor, bmc, path, head.count, page)
    if new:
        newest = new[-1]
        return Read(Cursor(path, newest["Id"], newest.get("Created", ""), position, head.etag), new)
    if position:  # nothing new: the cursor's entry is still the newest
        return Read(replace(cursor, entries_path=path, position=position, etag=head.etag), [])
    return Read(Cursor(path, "", "", 0, head.etag), [])  # an empty log


def _at_newest(bmc: RedfishClient, path: str) -> Cursor:
    """The cursor at the log's newest entry: what the log holds at a first read is history."""
    head = _page(bmc, path, skip=0, top=1)
    tail = _page(bmc, path, skip=head.count - 1, top=1) if head.count > 1 else head
    if not tail.members:
        return Cursor(path, "", "", 0, head.etag)
    newest = tail.members[-1]
    return Cursor(path, newest["Id"], newest.get("Created", ""), head.count, head.etag)


def _onwards(bmc: RedfishClient, path: str, head: LogEntries, start: int, page: int) -> tuple[list[dict], int]:
    """The entries of `head`, which starts at `start`, and of the pages after it; and the place of the last."""
    entries, current = list(head.members), head
    while len(current.members) == page and start + len(entries) < current.count:
        current = _page(bmc, path, skip=start + len(entries), top=page)
        entries += current.members
    return entries, start + len(entries)


def _back_to(cursor: Cursor, bmc: RedfishClient, path: str, count: int, page: int) -> tuple[list[dict], int]:
    """The entries after the cursor's, read back from the log's end (`count` entries) to the cursor's
    entry, or to the log's start if it is gone; and the place of the newest. A log that wraps
    meanwhile moves entries to lower places: a page may repeat some, never skip any."""
    newer: list[dict] = []
    end = count
    while end > 0:
        start = max(end - page, 0)
        members = _page(bmc, path, skip=start, top=end - start).members
        found = next((i for i in reversed(range(len(members))) if cursor.names(members[i])), None)
        if found is not None:
            return members[found + 1 :] + newer, count
        newer = members + newer
        end = start
    return newer, count


def _page(bmc: RedfishClient, path: str, *, skip: int, top: int) -> LogEntries:
    """Entries of the log, asked for without an ETag: the BMC has no 304 to answer."""
    entries = bmc.log_entries(path, skip=skip, top=top)
    assert entries is not None
    return entries
