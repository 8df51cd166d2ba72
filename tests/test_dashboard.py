"""`vcli dashboard`: the real server (`vcli dashboard --port=0` in a subprocess) over a store
filled by the real CLI, read with real HTTP requests.

Covers the index, the study page (trial rows, the plots when `vcli.plots` is there, the best
trial or the Pareto front marked), a job's replicas and a replica's log, escaping of user
input, read-only methods, 404s, the loopback rule, a clean stop on Ctrl-C and SIGTERM, and
the live update of a running study (its best trial shown while it runs).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.helpers import REPO, job_id_from_stderr, read_stderr_until, spawn, vcli, wait_for

PRINTER = """
import sys
print("hello from the trainer: 7f3a", flush=True)
print("a warning on stderr", file=sys.stderr, flush=True)
"""

SCORER = """
import sys
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:] if "=" in a)
for step in (1, 2):
    print(f"score={-(float(args['x']) - 0.3) ** 2 - 0.1 * (2 - step):.6f} step={step}", flush=True)
"""

TWO_METRICS = """
import sys
x = float(dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:] if "=" in a)["x"])
print(f"error={x * x:.6f} step=1", flush=True)
print(f"speed={1 - x:.6f} step=1", flush=True)
"""

#: A trial that ends only when the test creates `<gate>/go-<trial id>`.
GATED = """
import os, sys, time
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:] if "=" in a)
gate = os.path.join(args["gate"], "go-" + os.environ["CLOUD_ML_TRIAL_ID"])
while not os.path.exists(gate):
    time.sleep(0.05)
print(f"score={float(args['x']):.6f} step=1", flush=True)
"""

JOB_NAME = "<i>digits & co</i>"
LINE = re.compile(r"Serving the vcli dashboard at (http://\S+/) \(read-only; Ctrl-C stops it\)")


def _package(tmp: Path, name: str, source: str) -> Path:
    pkg = tmp / name
    pkg.mkdir()
    (pkg / "t.py").write_text(source)
    return pkg


def _pool(pkg: Path) -> str:
    return f"--worker-pool-spec=machine-type=n1-standard-4,local-package-path={pkg},script=t.py"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A home with one finished custom job and one finished three-trial study."""
    tmp = tmp_path_factory.mktemp("dashboard")
    home = tmp / "home"
    r = vcli(home, "custom-jobs", "create", f"--display-name={JOB_NAME}", _pool(_package(tmp, "printer", PRINTER)))
    assert r.returncode == 0, r.stderr
    job_id = job_id_from_stderr(r.stderr)
    r = vcli(home, "hp-tuning-jobs", "create", "--display-name=dash-study", "--metric=metric-id=score,goal=maximize",
             "--parameter-spec=parameter-id=x,type=double,min=0,max=1", _pool(_package(tmp, "scorer", SCORER)),
             "--algorithm=random-search", "--max-trial-count=3", "--parallel-trial-count=3", "--seed=1", "--format=json")
    assert r.returncode == 0, r.stderr
    study = json.loads(r.stdout)
    r = vcli(home, "hp-tuning-jobs", "create", "--display-name=dash-pareto", "--metric=metric-id=error,goal=minimize",
             "--metric=metric-id=speed,goal=maximize", "--parameter-spec=parameter-id=x,type=double,min=0,max=1",
             _pool(_package(tmp, "pareto", TWO_METRICS)), "--algorithm=random-search", "--max-trial-count=4",
             "--parallel-trial-count=4", "--seed=2", "--format=json")
    assert r.returncode == 0, r.stderr
    pareto = json.loads(r.stdout)
    return {"home": home, "job": job_id, "study": study["name"].rsplit("/", 1)[1], "trials": study["trials"],
            "best": study["bestTrialId"], "pareto": pareto}


@contextlib.contextmanager
def dashboard(home: Path, *flags: str, stop: int = signal.SIGINT, **env: str) -> Iterator[str]:
    """A running `vcli dashboard --port=0 FLAGS`: yields its base URL; stopped with `stop` after,
    which must end it with exit code 0 and nothing more on stderr."""
    proc = spawn(home, "dashboard", "--port=0", *flags, **env)
    try:
        first = read_stderr_until(proc, "Serving the vcli dashboard", timeout=30)
        match = LINE.search(first)
        assert match and first.count("\n") == 1, first
        url = match.group(1)
        if "0.0.0.0" in url:
            url = url.replace("0.0.0.0", "127.0.0.1")
        yield url
    finally:
        if proc.poll() is None:
            proc.send_signal(stop)
        out, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err
    assert "ERROR" not in err and "Traceback" not in err, err


def get(url: str, *, method: str = "GET", headers: dict[str, str] | None = None) -> tuple[int, str, Any]:
    """(status, body, headers) of one request; error statuses are returned, not raised."""
    req = urllib.request.Request(url, method=method, headers=headers or {}, data=b"x" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read().decode(), resp.headers
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(), e.headers


def get_json(url: str) -> Any:
    status, body, headers = get(url)
    assert status == 200 and headers["Content-Type"].startswith("application/json"), (status, body)
    return json.loads(body)


def test_index_lists_the_study_and_the_custom_job_escaped(store) -> None:
    with dashboard(store["home"]) as base:
        status, body, headers = get(base)
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"
    assert f'href="/studies/{store["study"]}"' in body and "dash-study" in body
    assert re.search(r"SUCCEEDED</span></td><td>[^<]+</td><td>3 / 3</td>", body), "trials done/total of the study"
    assert f'href="/jobs/{store["job"]}"' in body
    # A display name is user input: shown as text, never as markup.
    assert "&lt;i&gt;digits &amp; co&lt;/i&gt;" in body and JOB_NAME not in body
    # Nothing is loaded from elsewhere.
    assert "default-src 'none'" in headers["Content-Security-Policy"]
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", body)


def test_study_page_has_the_trial_rows_and_the_plots(store) -> None:
    with dashboard(store["home"]) as base:
        status, body, _ = get(f"{base}studies/{store['study']}")
        version = get_json(f"{base}api/studies/{store['study']}/version")["version"]
        again = get_json(f"{base}api/studies/{store['study']}/version")["version"]
        trials = get_json(f"{base}api/studies/{store['study']}/parts/trials")["html"]
    assert status == 200 and "dash-study" in body
    for t in store["trials"]:
        row = re.search(rf'<tr id="trial-{t["id"]}"[^>]*>(.*?)</tr>', body)
        assert row, f"no row for trial {t['id']}"
        x = next(p["value"] for p in t["parameters"] if p["parameterId"] == "x")
        score = t["finalMeasurement"]["metrics"][0]["value"]
        assert "SUCCEEDED" in row.group(1) and f"{x:.6g}" in row.group(1) and f"{score:.6g}" in row.group(1)
        assert re.search(r'href="/jobs/\d+">replicas</a>', row.group(1))
    assert f'data-version="{version}"' in body and again == version  # nothing ran: the version holds
    assert trials in body
    # The best trial: named in the summary with its value, its row marked.
    best = next(t for t in store["trials"] if t["id"] == store["best"])
    assert re.search(rf'<dt>Best trial</dt><dd><a href="\?order=best#trial-{best["id"]}" id="best-trial">trial {best["id"]}</a>: '
                     rf'score={best["finalMeasurement"]["metrics"][0]["value"]:.6g} at step 2 ', body)
    assert re.findall(r'<tr id="trial-(\d+)" class="best">', body) == [best["id"]]
    # The plots (vcli.plots), inline SVG: history, one slice per parameter, intermediate values.
    keys = re.findall(r'<figure data-key="([^"]+)" title="[^"]+">\s*<svg', body)
    assert {"history", "slice-x", "intermediate", "rank", "edf", "timeline"} <= set(keys), keys
    assert "vcli[plot]" not in body


def test_a_multi_objective_study_page_marks_the_pareto_front(store) -> None:
    pareto = store["pareto"]
    sid = pareto["name"].rsplit("/", 1)[1]
    with dashboard(store["home"]) as base:
        status, body, _ = get(f"{base}studies/{sid}")
    assert status == 200
    front = pareto["optimalTrialIds"]
    assert front and sorted(re.findall(r'<tr id="trial-(\d+)" class="pareto">', body), key=int) == sorted(front, key=int)
    for t in front:
        assert re.search(rf'<td>{t} <span class="badge" title="on the Pareto front[^"]*">pareto</span></td>', body)
    assert "<dt>Pareto front</dt><dd>trials " + ", ".join(f'<a href="?order=best#trial-{t}">{t}</a>' for t in front) in body
    # A figure per objective where a figure plots one objective.
    keys = set(re.findall(r'<figure data-key="([^"]+)"', body))
    assert {"parallel-error", "parallel-speed", "intermediate-error", "intermediate-speed", "pareto", "timeline"} <= keys


def test_without_matplotlib_the_study_page_says_how_to_get_the_plots(store, tmp_path: Path) -> None:
    """A Python where `import matplotlib` fails, as without the plot extra (a package of that
    name first on the path that raises ImportError): one hint line, the rest of the page works."""
    shadow = tmp_path / "no-matplotlib" / "matplotlib"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named matplotlib')\n")
    with dashboard(store["home"], PYTHONPATH=f"{shadow.parent}{os.pathsep}{REPO}") as base:
        status, body, _ = get(f"{base}studies/{store['study']}")
    assert status == 200 and "<svg" not in body
    assert body.count("pip install &#x27;vcli[plot]&#x27;") == 1
    assert all(f'<tr id="trial-{t["id"]}"' in body for t in store["trials"])


def test_job_page_links_the_replica_log_and_the_log_shows_what_the_trainer_printed(store) -> None:
    job = store["job"]
    with dashboard(store["home"], stop=signal.SIGTERM) as base:
        status, body, _ = get(f"{base}jobs/{job}")
        assert status == 200 and "&lt;i&gt;digits &amp; co&lt;/i&gt;" in body
        links = re.findall(rf'href="(/jobs/{job}/logs/[^"]+)"', body)
        assert links == [f"/jobs/{job}/logs/workerpool0-0"]
        status, log, _ = get(base + links[0][1:])
        api = get_json(f"{base}api/jobs/{job}/logs/workerpool0-0")
        rest = get_json(f"{base}api/jobs/{job}/logs/workerpool0-0?offset={api['offset']}")
        # A trial's job has its replicas too, reached from the study page.
        trial_job = re.search(r'href="/jobs/(\d+)">replicas', get(f"{base}studies/{store['study']}")[1]).group(1)
        trial_page = get(f"{base}jobs/{trial_job}")[1]
    assert status == 200 and "INFO  hello from the trainer: 7f3a" in log
    assert "ERROR  a warning on stderr" in log and 'data-ended="1"' in log
    assert ["INFO", "hello from the trainer: 7f3a"] in [[sev, msg] for sev, _, msg in api["lines"]]
    assert api["ended"] and rest == {"lines": [], "offset": api["offset"], "start": api["offset"], "ended": True}
    assert f'href="/studies/{store["study"]}"' in trial_page and "/logs/workerpool0-0" in trial_page


def test_only_get_and_head_unknown_ids_are_404_and_a_foreign_host_is_refused(store) -> None:
    with dashboard(store["home"]) as base:
        for method in ("POST", "PUT", "DELETE"):
            status, _, headers = get(f"{base}jobs/{store['job']}", method=method)
            assert status == 405 and headers["Allow"] == "GET, HEAD", method
        status, body, headers = get(base, method="HEAD")
        assert status == 200 and body == "" and int(headers["Content-Length"]) > 0
        for path in ("studies/123", f"studies/{store['job']}", "jobs/123", f"jobs/{store['job']}/logs/nope",
                     "api/studies/123/version", f"api/studies/{store['study']}/parts/nope", "nothing/here"):
            status, body, _ = get(base + path)
            assert status == 404 and "<h1>404</h1>" in body, path
        status, _, _ = get(base, headers={"Host": "attacker.example:80"})
        assert status == 403
        assert get(base)[0] == 200  # still serving


def test_a_non_loopback_host_needs_allow_remote(tmp_path: Path) -> None:
    home = tmp_path / "home"
    r = vcli(home, "dashboard", "--host=0.0.0.0", "--port=0", timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "--host" in r.stderr and "--allow-remote" in r.stderr and "Serving" not in r.stderr
    with dashboard(home, "--host=0.0.0.0", "--allow-remote") as base:
        status, body, _ = get(base)  # an empty home: no store yet, empty lists
        taken = vcli(home, "dashboard", f"--port={urllib.parse.urlsplit(base).port}", timeout=60)
    assert taken.returncode == 1 and taken.stderr.count("\n") == 1 and "[--port]" in taken.stderr, taken.stderr
    assert status == 200 and "No custom job yet." in body
    assert not (home / "vcli.db").exists()  # the dashboard created no store


@contextlib.contextmanager
def gated_study(tmp_path: Path, name: str) -> Iterator[tuple[Path, Path, str, subprocess.Popen[str]]]:
    """A running two-trial study (one at a time) whose trial N ends when the test creates
    `<gate>/go-N`: yields (home, gate, study id, the `create` process); Ctrl-C'd after if still
    running."""
    home, gate = tmp_path / "home", tmp_path / "gate"
    gate.mkdir()
    study = spawn(home, "hp-tuning-jobs", "create", f"--display-name={name}", "--metric=metric-id=score,goal=maximize",
                  "--parameter-spec=parameter-id=x,type=double,min=0,max=1", _pool(_package(tmp_path, "gated", GATED)),
                  f"--args=--gate={gate}", "--algorithm=random-search", "--max-trial-count=2",
                  "--parallel-trial-count=1", "--seed=3")
    try:
        yield home, gate, job_id_from_stderr(read_stderr_until(study, "submitted successfully", timeout=60)), study
    finally:
        if study.poll() is None:
            study.send_signal(signal.SIGINT)
        study.communicate(timeout=30)


def test_the_study_page_follows_a_running_study(tmp_path: Path) -> None:
    with gated_study(tmp_path, "live") as (home, gate, sid, study):
        with dashboard(home) as base:
            api = f"{base}api/studies/{sid}"

            def trial_state(trial: str) -> str | None:
                found = re.search(rf'<tr id="trial-{trial}"[^>]*><td>{trial}(?: <span class="badge"[^>]*>\w+</span>)?</td>'
                                  r"<td><span[^>]*>(\w+)<", get_json(f"{api}/parts/trials")["html"])
                return found.group(1) if found else None

            wait_for(lambda: trial_state("1") == "ACTIVE", 30, "trial 1 running")
            before = get_json(f"{api}/version")["version"]
            assert 'data-key="history"' not in get_json(f"{api}/parts/figures")["html"]  # nothing finished yet
            time.sleep(1)
            assert get_json(f"{api}/version")["version"] == before  # nothing changed, nor does the version
            (gate / "go-1").touch()
            after = wait_for(lambda: (v := get_json(f"{api}/version")["version"]) != before and v, 10, "a new version")
            wait_for(lambda: trial_state("1") == "SUCCEEDED", 5, "trial 1 SUCCEEDED in the table")
            assert after != before
            assert 'data-key="history"' in get_json(f"{api}/parts/figures")["html"]  # drawn again, with trial 1
            # While trial 2 runs, the best trial so far is trial 1, in the summary and the table.
            assert trial_state("2") == "ACTIVE"
            summary = get_json(f"{api}/parts/summary")["html"]
            assert re.search(r'<dt>Best trial so far</dt><dd><a href="\?order=best#trial-1" id="best-trial">trial 1</a>: score=[-0-9.e]+ at step 1 ',
                             summary), summary
            assert re.search(r'<tr id="trial-1" class="best">', get_json(f"{api}/parts/trials")["html"])
            (gate / "go-2").touch()
            assert study.wait(timeout=60) == 0
            assert trial_state("2") == "SUCCEEDED" and get_json(f"{api}/version")["version"] != after
            assert "<dt>Best trial</dt>" in get_json(f"{api}/parts/summary")["html"]  # no longer "so far"


def test_the_read_only_store_refuses_writes_and_creates_nothing(tmp_path: Path) -> None:
    from vcli.errors import StoreError
    from vcli.store import Store

    with pytest.raises(StoreError, match="no vcli store"):
        Store(tmp_path / "none", readonly=True)
    assert not (tmp_path / "none").exists()
    writer = Store(tmp_path / "home")
    job = writer.create_job(kind="customJob", display_name="j", record={}, state="JOB_STATE_RUNNING")
    reader = Store(tmp_path / "home", readonly=True)
    with pytest.raises(StoreError):
        reader.update_job(job.id, display_name="changed")
    with pytest.raises(StoreError):
        reader.create_job(kind="customJob", display_name="k", record={}, state="JOB_STATE_RUNNING")
    writer.set_state(job.id, "JOB_STATE_SUCCEEDED")  # the reader sees what writers commit
    assert [(j.display_name, j.state) for j in reader.list_jobs("customJob")] == [("j", "JOB_STATE_SUCCEEDED")]
    reader.close()
    writer.close()


def test_the_study_page_updates_itself_in_a_real_browser(tmp_path: Path) -> None:
    """The page's own script, in headless Chromium: while a study runs, a trial's row turns
    SUCCEEDED, the figures appear and the summary names it the best trial so far, without a
    reload; no console error; every request goes to the dashboard itself. A screenshot is kept
    as a CI artifact."""
    from tests.harness.browser import Browser

    with gated_study(tmp_path, "live-browser") as (home, gate, sid, study):
        with dashboard(home) as base, Browser(offline=False, timeout=30) as browser:
            row_state = "(document.querySelector('#trial-{0} td:nth-child(2)') || {{}}).textContent"
            # Best first (`?order=best`): the live page fetches its parts with its own query.
            browser.open(f"{base}studies/{sid}?order=best", wait_for=f"{row_state.format(1)} === 'ACTIVE'", timeout=30)
            browser.evaluate("window.__sameDocument = true")  # gone if the page reloads itself
            assert browser.evaluate("document.querySelectorAll('figure[data-key=\"history\"] svg').length") == 0
            (gate / "go-1").touch()
            deadline = time.monotonic() + 20
            while not browser.evaluate(f"{row_state.format(1)} === 'SUCCEEDED' && "
                                       "document.querySelectorAll('figure[data-key=\"history\"] svg').length > 0"):
                assert time.monotonic() < deadline, browser.evaluate("document.body.innerText")[-2000:]
                time.sleep(0.2)
            assert browser.evaluate("window.__sameDocument") is True
            # The best trial while the study runs: trial 1, trial 2 still ACTIVE.
            deadline = time.monotonic() + 10
            while not browser.evaluate("(document.getElementById('best-trial') || {}).textContent === 'trial 1'"):
                assert time.monotonic() < deadline, browser.evaluate("document.body.innerText")[:2000]
                time.sleep(0.2)
            assert browser.evaluate(f"{row_state.format(2)}") == "ACTIVE"
            assert browser.evaluate("document.querySelector('#trial-1').classList.contains('best')") is True
            assert "Best trial so far" in browser.evaluate("document.querySelector('[data-part=summary]').innerText")
            # The page's clock is UTC, 24-hour, as every time on the page (never the browser's local 12-hour time).
            checked = browser.evaluate("document.body.innerText")
            assert re.search(r"live · checked \d\d:\d\d:\d\d UTC", checked), checked[-500:]
            artifacts = Path(os.environ.get("VCLI_ARTIFACTS_DIR") or tmp_path)
            artifacts.mkdir(parents=True, exist_ok=True)
            assert browser.screenshot(artifacts / "dashboard-study.png").stat().st_size > 10_000
            assert browser.console_errors == []
            assert browser.requests and all(u.startswith((base, "data:")) for u in browser.requests), browser.requests
            assert any(u.endswith(f"/api/studies/{sid}/parts/trials?order=best") for u in browser.requests), browser.requests
            (gate / "go-2").touch()
            assert study.wait(timeout=60) == 0


def test_clients_that_go_away_mid_response_leave_the_terminal_quiet(capsys: pytest.CaptureFixture[str]) -> None:
    # Each was a 20-line socketserver traceback (BrokenPipeError / ConnectionResetError): a tab
    # closed while a big study page loads (a probe saw 2,540 after a slowloris client died).
    # The server's own error hook, with the errors the socket raises mid-write:
    from vcli.dashboard.server import DashboardServer

    server = DashboardServer(("127.0.0.1", 0), reader=None, loopback_only=True)  # type: ignore[arg-type]
    try:
        for error in (BrokenPipeError(32, "Broken pipe"), ConnectionResetError(104, "Connection reset by peer"),
                      TimeoutError("timed out"), ValueError("a bug\nsecond line")):
            try:
                raise error
            except Exception:
                server.handle_error(None, ("127.0.0.1", 5555))
    finally:
        server.server_close()
    err = capsys.readouterr().err
    assert err == "ERROR: (vcli.dashboard) a request from 127.0.0.1 failed: ValueError: a bug\n", err


def test_a_silent_connection_is_closed_after_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    # A client that connected and sent nothing (or half a request line) held its thread for
    # ever: a probe's idle connections were never closed.
    import socket
    import threading

    from vcli.dashboard.server import DashboardServer, Handler

    assert Handler.timeout is not None and 0 < Handler.timeout <= 60
    monkeypatch.setattr(Handler, "timeout", 0.5)  # the same socket timeout, made short for the test
    server = DashboardServer(("127.0.0.1", 0), reader=None, loopback_only=True)  # type: ignore[arg-type]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        for sent in (b"", b"GET / HT"):
            with socket.create_connection(server.server_address[:2], timeout=10) as client:
                client.sendall(sent)
                started = time.monotonic()
                assert client.recv(1024) == b""  # closed by the server, not the client's 10 s
                assert time.monotonic() - started < 5
    finally:
        server.shutdown()
        server.server_close()
