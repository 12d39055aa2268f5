"""The console's start page tells the truth about who decides: by default the requester
(and operators), but a four-eyes tool of an agent (the bundled ``deploys``) needs someone
else, and the page names it and its approvers."""

from __future__ import annotations

import html

from tests.adapters.test_console_examples import Console, console

__all__ = ["console"]


async def test_the_start_page_names_the_tools_someone_else_approves(console: Console) -> None:
    await console.login("tok-ops")

    page = html.unescape(await console.page("/start"))

    assert "only you may decide" not in page
    assert "The run is started as ops:linus. Each tool says who may decide its requests" in page
    assert (
        "deploys: deploy is four-eyes, so someone other than you approves it "
        "(group:release-managers)." in page
    )
    assert page.count("is four-eyes") == 1  # refunds, oncall: the requester decides
    assert 'Try: "deploy checkout 2.4.1"' in page  # each agent says what to type
