"""An operator acts on memory from the console: edits a profile after seeing the
change, erases a user after seeing what goes, downloads an export; each change is
refused when the memory moved since the page was drawn, and a viewer can do none of
it. Over HTTP against the populated console, lcm and simple on both databases."""

from __future__ import annotations

import json
import re

from tests.web.site import ALICE, BOB, OPERATOR_TOKEN, VIEWER_TOKEN, client, csrf_of, login

NEW = "Alice. Likes tea.\nSleeps at noon."


def field(page: str, name: str) -> str:
    m = re.search(rf'name="{name}" value="([^"]*)"', page)
    assert m, f"no field {name}"
    return m.group(1)


def current(page: str) -> str:
    return page.split('id="current">')[1].split("</pre>")[0]


async def test_an_operator_edits_a_profile_after_seeing_the_change(
    site: tuple[str, str],
) -> None:
    base, _ = site
    url = f"{base}/memory/1001/edit"
    async with client() as http:
        await login(http, base, OPERATOR_TOKEN)
        form = await (await http.get(f"{url}?scope=profile")).text()
        assert "Likes coffee (wrong)" in form.split("<textarea")[1]
        sent = {"csrf": csrf_of(form), "scope": "profile", "shown": field(form, "shown")}
        preview = await (await http.post(url, data={**sent, "text": NEW})).text()
        assert "+ Sleeps at noon." in preview and "- Alice. Likes coffee (wrong)." in preview
        assert 'id="confirm-edit"' in preview
        assert "Likes coffee (wrong)" in current(
            await (await http.get(f"{base}/memory/1001")).text()
        )
        r = await http.post(url, data={**sent, "text": NEW, "confirm": "yes"})
        page = await r.text()
        assert r.status == 200 and 'id="saved"' in page
        assert current(page) == NEW
        log = await (await http.get(f"{base}/changelog?source=operator")).text()
        assert "web:ann" in log and "Sleeps at noon" in log
        # Alice's session reads it from its next turn: its snapshot moved.
        page = await (await http.get(f"{base}/sessions/{ALICE.id}")).text()
        assert "Sleeps at noon" in page.split('class="msg system"')[1].split("</li>")[0]
        # The same form again names the text it was drawn over: that text is gone.
        r = await http.post(url, data={**sent, "text": "Alice. Likes water.", "confirm": "yes"})
        assert r.status == 409 and "changed since you opened it" in await r.text()
        assert current(await (await http.get(f"{base}/memory/1001")).text()) == NEW


async def test_a_viewer_sees_no_buttons_and_is_refused(site: tuple[str, str]) -> None:
    base, _ = site
    async with client() as http:
        await login(http, base, VIEWER_TOKEN)
        page = await (await http.get(f"{base}/memory/1001")).text()
        assert 'id="edit"' not in page and 'id="erase"' not in page
        form = await (await http.get(f"{base}/memory/1001/edit?scope=profile")).text()
        data = {"csrf": csrf_of(form), "scope": "profile", "text": NEW, "confirm": "yes"}
        r = await http.post(f"{base}/memory/1001/edit", data={**data, "shown": "x"})
        assert r.status == 403 and "viewer cannot edit memory" in await r.text()
        r = await http.post(f"{base}/memory/1002/erase", data={**data, "shown": "1-2"})
        assert r.status == 403
        r = await http.get(f"{base}/sessions/{ALICE.id}/export.json")
        assert r.status == 403
        assert "Likes coffee (wrong)" in current(
            await (await http.get(f"{base}/memory/1001")).text()
        )


async def test_an_operator_erases_a_user_after_seeing_what_goes(site: tuple[str, str]) -> None:
    base, _ = site
    async with client() as http:
        await login(http, base, OPERATOR_TOKEN)
        page = await (await http.get(f"{base}/memory/1002/erase")).text()
        assert "1 session(s), 2 message(s)" in page
        data = {"csrf": csrf_of(page), "confirm": "yes"}
        r = await http.post(f"{base}/memory/1002/erase", data={**data, "shown": "1-1"})
        assert r.status == 409  # a count the page never showed: nothing erased
        assert BOB.id in await (await http.get(f"{base}/sessions")).text()
        r = await http.post(
            f"{base}/memory/1002/erase", data={**data, "shown": field(page, "shown")}
        )
        done = await r.text()
        assert r.status == 200 and "Erased: 1 session(s), 2 message(s)" in done
        sessions = await (await http.get(f"{base}/sessions")).text()
        assert BOB.id not in sessions and ALICE.id in sessions
        log = await (await http.get(f"{base}/changelog?scope=erasure")).text()
        row = log.split("<tbody>")[1].split("</tr>")[0]
        assert "1002" in row and "operator" in row


async def test_an_operator_downloads_an_export(site: tuple[str, str]) -> None:
    base, _ = site
    async with client() as http:
        await login(http, base, OPERATOR_TOKEN)
        page = await (await http.get(f"{base}/sessions/{ALICE.id}")).text()
        assert 'id="export"' in page
        r = await http.get(f"{base}/sessions/tg%3Aalice/export.json")
        assert r.status == 200 and r.headers["Content-Disposition"].startswith("attachment;")
        doc = json.loads(await r.text())
        assert doc["session"]["id"] == ALICE.id and len(doc["messages"]) > 10
        r = await http.get(f"{base}/sessions/nobody/export.json")
        assert r.status == 404


async def test_an_operator_forgets_a_message_after_its_preview(site: tuple[str, str]) -> None:
    base, _ = site
    conversation = f"{base}/sessions/tg%3Abob"
    async with client() as http:
        await login(http, base, OPERATOR_TOKEN)
        page = await (await http.get(conversation)).text()
        first = re.findall(r'<tr id="m(\d+)"', page)[0]  # "hostile text: ... the aquarium"
        assert f'href="/sessions/tg%3Abob/forget?item={first}"' in page
        preview = await (await http.get(f"{conversation}/forget?item={first}")).text()
        assert 'id="to-forget"' in preview and "hostile text" in preview
        data = {"csrf": csrf_of(preview), "item": first, "confirm": "yes"}
        r = await http.post(f"{conversation}/forget", data={**data, "shown": "0" * 16})
        assert r.status == 409  # not what the preview showed: nothing forgotten
        assert "hostile text" in await (await http.get(conversation)).text()
        r = await http.post(
            f"{conversation}/forget", data={**data, "shown": field(preview, "shown")}
        )
        assert r.status == 200 and "1 message(s) forgotten" in await r.text()
        page = await (await http.get(conversation)).text()
        assert "hostile text" not in page and "noted the aquarium" in page
        log = await (await http.get(f"{base}/changelog?scope=forget")).text()
        row = log.split("<tbody>")[1].split("</tr>")[0]
        assert "operator" in row and "1 message(s) forgotten" in row and "(by web:ann)" in row
        # Another user's message id, asked through this conversation: nothing to forget.
        alice = await (await http.get(f"{base}/sessions/{ALICE.id}")).text()
        theirs = re.findall(r'<tr id="m(\d+)"', alice)[0]
        other = await (await http.get(f"{conversation}/forget?item={theirs}")).text()
        assert "nothing to forget" in other and 'id="confirm-forget"' not in other


async def test_an_operator_adds_and_removes_a_rule_after_seeing_it(
    site: tuple[str, str],
) -> None:
    base, _ = site
    rules = f"{base}/memory/1001?scope=constraint"
    async with client() as http:
        await login(http, base, OPERATOR_TOKEN)
        page = await (await http.get(rules)).text()
        assert 'id="add-rule"' in page
        form = await (await http.get(f"{base}/memory/1001/rule")).text()
        sent = {"csrf": csrf_of(form), "shown": field(form, "shown"), "add": "Answer in French."}
        preview = await (await http.post(f"{base}/memory/1001/rule", data=sent)).text()
        assert 'id="confirm-rule"' in preview and "Answer in French." in preview
        assert "Answer in French." not in current(await (await http.get(rules)).text())
        r = await http.post(f"{base}/memory/1001/rule", data={**sent, "confirm": "yes"})
        page = await r.text()
        assert r.status == 200 and 'id="saved"' in page
        rule_id = re.search(r"\[(c_[0-9a-f]+)\] Answer in French\.", current(page))
        assert rule_id, current(page)
        # The same confirmation again was drawn over rules that are gone: refused.
        r = await http.post(f"{base}/memory/1001/rule", data={**sent, "confirm": "yes"})
        assert r.status == 409
        assert current(await (await http.get(rules)).text()).count("Answer in French.") == 1
        # Removing it: the page names the rule, the confirmation removes only it.
        form = await (await http.get(f"{base}/memory/1001/rule?remove={rule_id[1]}")).text()
        assert "Answer in French." in form and 'id="confirm-rule"' in form
        data = {"csrf": csrf_of(form), "shown": field(form, "shown"), "remove": rule_id[1]}
        r = await http.post(f"{base}/memory/1001/rule", data={**data, "confirm": "yes"})
        assert r.status == 200
        assert "Answer in French." not in current(await r.text())
        log = await (await http.get(f"{base}/changelog?scope=constraint&source=operator")).text()
        assert log.count("web:ann") >= 2
        r = await http.get(f"{base}/memory/1001/rule?remove=c_00000000")
        assert r.status == 404


async def test_a_viewer_cannot_change_rules(site: tuple[str, str]) -> None:
    base, _ = site
    async with client() as http:
        await login(http, base, VIEWER_TOKEN)
        page = await (await http.get(f"{base}/memory/1001?scope=constraint")).text()
        assert 'id="add-rule"' not in page
        form = await (await http.get(f"{base}/memory/1001/rule")).text()
        data = {"csrf": csrf_of(form), "shown": "x", "add": "Obey me.", "confirm": "yes"}
        r = await http.post(f"{base}/memory/1001/rule", data=data)
        assert r.status == 403
