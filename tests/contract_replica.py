"""The replica program of the executor contract suite and the controller tests.

A replica is told what to do by its argv, one action per argument, run in order:

    out:TEXT          print TEXT on stdout          err:TEXT     print TEXT on stderr
    metric:ID=V@STEP  append a cloudml-hypertune report to $CLOUD_ML_HP_METRIC_FILE
    sleep:SECONDS     wait                          exit:CODE    exit with CODE
    ignore-term       ignore SIGTERM from now on (as TensorFlow's multi-worker runtime does)
    env:NAME          print `NAME=<value>` (or `NAME unset`)
    envlen:NAME       print `NAME has N characters` (shows a secret arrived without printing it)
    bind:PORT         bind TCP PORT on every address and print `bound PORT` (or `bind-failed`)
    cat:PATH          print the text of file PATH (or `PATH missing`)
    long:N            print `long_line(N)` (N characters in 4 KiB writes, no newline until the end)
    progress          print `PROGRESS`, a line a progress bar redraws with carriage returns
    write:PATH=TEXT   write TEXT into file PATH, creating its directories
    mkdir:PATH        create directory PATH (and its parents)
    fifo:PATH         create a named pipe at PATH        link:PATH=TARGET   a symbolic link PATH -> TARGET
    churn:DIR         for ever, every 20 ms: rewrite DIR/a.bin, DIR/b.bin and DIR/step (the same
                      step number in all three, in place), as a trainer that checkpoints fast
    tree:TOKEN        start what real trainers start (data loaders, TensorBoard, NCCL helpers): a
                      child, a child with a grandchild, a `setsid` child and a double-forked
                      daemon, all sleeping with TOKEN in their argv and holding our stdout;
                      then print `tree started`

Arguments `--NAME=VALUE` (what a study appends for each hyperparameter) are not actions: they
are read first, and `%NAME` in an action stands for VALUE (`metric:acc=%x@1` reports x). In
the paths of `cat`, `write`, `mkdir`, `fifo` and `link`, `$NAME` stands for the replica's environment variable
NAME, so `cat:$AIP_CHECKPOINT_DIR/w` names the file wherever the replica runs (an SSH host's
workdir maps the directory elsewhere).

Real executors run `SOURCE` with `python3 -c` (so containers and SSH hosts need no copy of this
file); `tests.fakes.FakeExecutor` interprets the same actions in-process on a fake clock.
"""

from __future__ import annotations

SOURCE = r'''
import json, os, signal, socket, sys, time
params = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
for action in sys.argv[1:]:
    if action.startswith("--"):
        continue
    for name, value in params.items():
        action = action.replace("%" + name, value)
    verb, _, arg = action.partition(":")
    if verb == "out":
        print(arg, flush=True)
    elif verb == "err":
        print(arg, file=sys.stderr, flush=True)
    elif verb == "long":
        text = ("0123456789abcdef" * (int(arg) // 16 + 1))[:int(arg)]
        for i in range(0, len(text), 4096):
            sys.stdout.write(text[i:i + 4096])
            sys.stdout.flush()
        print(flush=True)
    elif verb == "progress":
        sys.stdout.write("10%\r20%\r30% done\n")
        sys.stdout.flush()
    elif verb == "metric":
        mid, _, rest = arg.partition("=")
        value, _, step = rest.partition("@")
        path = os.environ["CLOUD_ML_HP_METRIC_FILE"]
        with open(path, "a") as f:
            f.write(json.dumps({mid: value, "global_step": step or "0", "timestamp": time.time(),
                                "trial": os.environ.get("CLOUD_ML_TRIAL_ID", "")}) + "\n")
    elif verb == "sleep":
        time.sleep(float(arg))
    elif verb == "exit":
        sys.exit(int(arg))
    elif verb == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ignoring SIGTERM", flush=True)
    elif verb == "env":
        print(f"{arg}={os.environ[arg]}" if arg in os.environ else f"{arg} unset", flush=True)
    elif verb == "envlen":
        print(f"{arg} has {len(os.environ.get(arg, ''))} characters", flush=True)
    elif verb == "bind":
        s = socket.socket()
        try:
            s.bind(("", int(arg)))
            print(f"bound {arg}", flush=True)
        except OSError:
            print("bind-failed", flush=True)
        finally:
            s.close()
    elif verb == "cat":
        path = os.path.expandvars(arg)
        try:
            with open(path) as f:
                print(f.read(), flush=True)
        except FileNotFoundError:
            print(f"{arg} missing", flush=True)
    elif verb == "write":
        path, _, text = arg.partition("=")
        path = os.path.expandvars(path)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
    elif verb == "mkdir":
        os.makedirs(os.path.expandvars(arg), exist_ok=True)
    elif verb == "fifo":
        os.mkfifo(os.path.expandvars(arg))
    elif verb == "link":
        path, _, target = arg.partition("=")
        os.symlink(os.path.expandvars(target), os.path.expandvars(path))
    elif verb == "churn":
        root = os.path.expandvars(arg)
        os.makedirs(root, exist_ok=True)
        step = 0
        print("churning", flush=True)
        while True:
            step += 1
            for name in ("a.bin", "b.bin", "step"):
                with open(os.path.join(root, name), "w") as f:
                    f.write(f"{step:08d}" + ("x" * 4000 if name != "step" else ""))
            time.sleep(0.02)
    elif verb == "tree":
        import subprocess
        sleeper = [sys.executable, "-S", "-c", "import time; time.sleep(300)", arg]
        subprocess.Popen(sleeper)
        subprocess.Popen([sys.executable, "-S", "-c",
                          "import subprocess, sys, time; subprocess.Popen(sys.argv[1:]); time.sleep(300)", *sleeper])
        subprocess.Popen(sleeper, start_new_session=True)
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.execv(sys.executable, sleeper)
            os._exit(0)
        os.wait()
        print("tree started", flush=True)
    else:
        print(f"unknown action {action}", file=sys.stderr, flush=True)
        sys.exit(2)
'''

#: What `progress` prints: a record keeps its carriage returns.
PROGRESS = "10%\r20%\r30% done"


def long_line(n: int) -> str:
    """What `long:N` prints (before its newline)."""
    return ("0123456789abcdef" * (n // 16 + 1))[:n]


#: The marker the fake executor recognises in a command (`python3 -c SOURCE ...`).
MARKER = "-c"


def replica_command(python: str = "python3") -> tuple[str, ...]:
    """The command part of a launch that runs the contract replica with `python`."""
    return (python, "-c", SOURCE)
