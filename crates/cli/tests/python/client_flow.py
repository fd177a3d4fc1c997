"""create -> wait -> report -> reopen through a client generated from
korvus serve's OpenAPI document by openapi-python-client.

Usage: client_flow.py <dir holding the generated package `korvus_client`> <base url> <token>
"""

import sys
import time

sys.path.insert(0, sys.argv[1])

from korvus_client import AuthenticatedClient  # noqa: E402
from korvus_client.api.incidents import create_incident  # noqa: E402
from korvus_client.api.logs import export_log  # noqa: E402
from korvus_client.api.reports import get_report_markdown, list_reports  # noqa: E402
from korvus_client.api.sessions import create_session, get_session, reopen_session  # noqa: E402
from korvus_client.models import (  # noqa: E402
    Incident,
    Message,
    NewIncident,
    NewSession,
    ReportPage,
    Session,
    SessionDetail,
    SessionDetailStatus,
    SessionStatus,
)

base, token = sys.argv[2], sys.argv[3]
client = AuthenticatedClient(base_url=base, token=token, raise_on_unexpected_status=True)


def wait(session_id, revision):
    """The session's row once its run of `revision` ended."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        # One session in full: the row with its live counters and cause.
        row = get_session.sync(id=session_id, client=client)
        assert isinstance(row, SessionDetail), row
        if row.revision == revision and row.status != SessionDetailStatus.RUNNING:
            assert row.cause is None and row.queue_position is None, row
            return row
        time.sleep(0.1)
    raise AssertionError(f"session {session_id} revision {revision} did not end")


incident = create_incident.sync(client=client, body=NewIncident(title="from a generated client"))
assert isinstance(incident, Incident), incident
session = create_session.sync(id=incident.id, client=client, body=NewSession(prompt="check the disk"))
assert isinstance(session, Session), session
assert session.status == SessionStatus.RUNNING

row = wait(session.id, 1)
assert row.status == SessionDetailStatus.COMPLETED, row
reports = list_reports.sync(id=session.id, client=client)
assert isinstance(reports, ReportPage) and len(reports.items) == 1, reports
markdown = get_report_markdown.sync_detailed(id=session.id, revision=1, client=client)
assert markdown.status_code == 200 and markdown.content.startswith(b"#"), markdown

reopened = reopen_session.sync(id=session.id, client=client, body=Message(message="look again"))
assert isinstance(reopened, Session) and reopened.revision == 2, reopened
row = wait(session.id, 2)
assert row.status == SessionDetailStatus.COMPLETED, row
reports = list_reports.sync(id=session.id, client=client)
assert [r.revision for r in reports.items] == [1, 2], reports

# JSON lines are no media type the generator parses: the export's answer
# is read raw, from a client that does not refuse what it cannot parse.
raw = AuthenticatedClient(base_url=base, token=token, raise_on_unexpected_status=False)
log = export_log.sync_detailed(id=session.id, client=raw)
assert log.status_code == 200 and len(log.content.splitlines()) > 2, log
print(f"client flow ok: session {session.id}, 2 revisions, {len(log.content.splitlines())} log lines")
