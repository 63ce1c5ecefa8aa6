#!/usr/bin/env bash
# A newcomer's paths through a fresh clone, printed as a transcript (issue 20's
# closing note): install from the clone, the demo and the commands it prints
# pasted back, store URLs with passwords in every form, key files, Ctrl-C and
# Ctrl-D at the prompt, printed commands that must paste (reconcile's, a resume
# killed inside its node), a guide's first example with no server named, worker
# mistakes, wrong answers, LangGraph threads, copy and rekey progress and
# interrupts, copy's refusals, invisible ids and dotted keys, history's memory,
# small things (--version, help, empty ids, a pipe closed early). It installs
# only the clone's '.[all]': every store below is made with the public API.
#
#   scripts/newcomer_transcript.sh [DIR]   # clones into DIR (default: a new temp dir)
#
# Needs PostgreSQL (AGENTFLOW_POSTGRES_DSN, default postgresql://postgres@127.0.0.1:5432/test,
# trust authentication) and network access to the package index (or its cache).
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="${1:-$(mktemp -d "${TMPDIR:-/tmp}/newcomer.XXXXXX")}"
dsn="${AGENTFLOW_POSTGRES_DSN:-postgresql://postgres@127.0.0.1:5432/test}"
ns="newcomer-$$-$RANDOM"

# Everything printed is kept too, to search it for the password at the end.
mkdir -p "$work"
exec > >(tee "$work/transcript.txt") 2>&1

# Print a command as typed, run it, print what it printed and its exit status
# (a pipeline's: the last command that failed in it).
run() {
  printf '\n$ %s\n' "$1"
  bash -o pipefail -c "$1" 2>&1
  printf '(exit %s)\n' "$?"
}
# The first printed command of the last output that starts with PREFIX.
printed() { grep -m1 -o "agentflow $1.*" "$work/last.txt" | sed 's/   #.*//'; }
capture() {
  printf '\n$ %s\n' "$1"
  bash -o pipefail -c "$1" > "$work/last.txt" 2>&1
  local status=$?
  cat "$work/last.txt"
  printf '(exit %s)\n' "$status"
}

echo "# fresh clone of $(git -C "$repo" rev-parse --short HEAD) in $work"
git clone -q "$repo" "$work/agentflow" || exit 1
cd "$work/agentflow" || exit 1
run "python3 -m venv .venv && .venv/bin/pip install -q -e '.[all]' 2>&1 | grep -v '^WARNING: Location' || true"
export PATH="$PWD/.venv/bin:$PATH" VIRTUAL_ENV="$PWD/.venv" COLUMNS=100
run "grep -m1 '^name' pyproject.toml; agentflow --version"
run "pip download --no-deps -q -d /tmp/unused agentflow-durable 2>&1 | tail -1  # the name is free on the index"
run "grep -rn \"install 'agentflow\\[\\|install agentflow\\b\" README.md docs src | wc -l   # no line installs the unrelated agentflow"

echo; echo "## the demo, and the command it prints, pasted back"
capture "agentflow demo --thread refund-1 --hold 0.5"
run "$(printed "resume refund-1 --value '\"approve\"'") | tail -2"

echo; echo "## a password in the store URL, in each form: never printed"
for url in "${dsn/postgres@/postgres:S3cret-pw@}" "$dsn?password=S3cret-pw" \
  "postgresql:///test?host=/var/run/postgresql&user=postgres&password=S3cret-pw" \
  "$dsn?passfile=/home/S3cret-pw/.pgpass" "$dsn?sslpassword=S3cret-pw"; do
  capture "agentflow --store '$url' --namespace $ns demo --thread pw-\$RANDOM --hold 0 | tail -4"
done
capture "agentflow --store '$dsn?password=S3cret-pw' --namespace $ns threads --limit 1"
run "export AGENTFLOW_STORE='$dsn?password=S3cret-pw'; $(printed "--store") --json | grep -c '\"thread\"'   # the note followed, the line pasted"
run "agentflow --store 'postgresql:///test?host=/nowhere&password=S3cret-pw' threads --json"
run "agentflow --store 'postgresql://u:S3cret-pw@127.0.0.1:1/test' threads"
run "agentflow --store 'mysql://u:S3cret-pw@db/x' threads"
run "agentflow copy '$dsn?password=S3cret-pw' sqlite:///.runs/from-pg.db --namespace $ns | head -3"

echo; echo "## key files"
run "python -c 'import json; from agentflow.checkpoint.sealing import new_key; print(json.dumps({\"current\": \"k1\", \"keys\": {\"k1\": new_key()}}))' > keys.json; ls -l keys.json | cut -c1-10"
run "agentflow --store sqlite:///.runs/sealed.db --keys-file keys.json demo --hold 0 --approve | tail -1"
run "chmod 600 keys.json && agentflow --store sqlite:///.runs/sealed.db --keys-file keys.json demo --thread sealed-1 --hold 0 --approve | tail -1"

echo; echo "## Ctrl-C and Ctrl-D at the approval prompt (on a terminal)"
cat > "$work/at_prompt.py" <<'EOF'
"""Run the demo on a terminal, type one key at its prompt, print what it showed."""
import os, pty, re, select, subprocess, sys, termios, fcntl, time
key = {"ctrl-c": b"\x03", "ctrl-d": b"\x04"}[sys.argv[1]]
controller, terminal = pty.openpty()
proc = subprocess.Popen(["agentflow", "demo", "--thread", sys.argv[2], "--hold", "0"],
                        stdin=terminal, stdout=terminal, stderr=terminal, start_new_session=True,
                        preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
os.close(terminal)
out, sent = b"", False
while True:
    ready, _, _ = select.select([controller], [], [], 0.1)
    if ready:
        try:
            chunk = os.read(controller, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    if not sent and b"[approve/reject]" in out:
        time.sleep(0.2)
        os.write(controller, key)
        sent = True
print(re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out.decode().replace("\r", "")), end="")
print(f"(exit {proc.wait()})")
EOF
run "python $work/at_prompt.py ctrl-c tty-1"
run "python $work/at_prompt.py ctrl-d tty-2"

echo; echo "## printed commands that paste: reconcile, a resume killed mid-answer"
run "python samples/lost_reply.py --thread pay-2 | tail -1"
capture "agentflow journal pay-2 --json | python -c 'import json,sys; p=json.load(sys.stdin)[\"pending\"][0]; print(p[\"operation_id\"], p[\"attempt\"])'"
op="$(cut -d' ' -f1 "$work/last.txt")"
capture "agentflow reconcile pay-2 $op --attempt 1 --decision replay_success --receipt '{\"charge_id\": \"ch_1\", \"cents\": 4250}'"
run "$(printed "--graph") 2>&1 | tail -1   # as printed: MODULE:ATTR is still to fill in"
run "agentflow --graph samples.lost_reply:build_graph resume pay-2 | tail -1"
cat > "$work/killed_answer.py" <<'EOF'
"""agentflow ARGS, killed (SIGKILL) inside the approval node once it has taken the answer."""
import functools, os, signal, sys
import agentflow.cli.demo as demo
answer = demo.request_approval

@functools.wraps(answer)
async def request_approval(state, ctx):
    await answer(state, ctx)  # the step is claimed and the answer taken: die here
    os.kill(os.getpid(), signal.SIGKILL)

demo.request_approval = request_approval
from agentflow.cli.app import main
main(sys.argv[1:])
EOF
capture "agentflow demo --thread killed-1 --hold 0"
run "python $work/killed_answer.py resume killed-1 --value '\"approve\"' 2>/dev/null; agentflow show killed-1 | grep -E 'status|claimed'"
run "$(printed "resume killed-1 --value '\"approve\"'") | grep -v '^[│┏┃┡└]'   # waits out the dead process's claim"

run "timeout -s KILL 4 agentflow demo --thread timer-1 --hold 8 --approve > /dev/null; agentflow show timer-1 | grep -E 'status|wakes'"
run "agentflow resume timer-1 | grep -v '^[│┏┃┡└]'   # a timer due within a minute: counted down, then on"

echo; echo "## a guide's first example, with no server named"
run "awk '/^# essay.py/{p=1} p && /^\`\`\`/{exit} p' docs/langgraph.md > essay.py; env -u AGENTFLOW_POSTGRES_DSN python essay.py && agentflow --store sqlite:///.runs/essay.db --namespace tenant-42 threads"

echo; echo "## worker mistakes"
run "agentflow --store sqlite:///.runs/checkpoint.db worker --once; ls .runs/checkpoint.db"
run "agentflow --store '${dsn%/*}/no_such_db' worker --once"

echo; echo "## unhelpful answers, now helpful"
run "agentflow demo --thread wrong-1 --hold 0 > /dev/null; agentflow resume wrong-1 --value '\"maybe\"'"
run "agentflow --namespace acmee threads"
cat > "$work/lg.py" <<'EOF'
"""A LangGraph thread through AgentflowSaver, paused at an interrupt."""
import asyncio
from typing import TypedDict
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from agentflow.checkpoint import open_store
from agentflow.integrations.langgraph import AgentflowSaver

class State(TypedDict):
    n: int
    answer: str

async def main() -> None:
    async with open_store("sqlite:///.runs/checkpoints.db") as store:
        graph = StateGraph(State)
        graph.add_node("count", lambda s: {"n": s["n"] + 1})
        graph.add_node("ask", lambda s: {"answer": interrupt({"question": "ok?"})})
        graph.add_edge(START, "count").add_edge("count", "ask").add_edge("ask", END)
        app = graph.compile(checkpointer=AgentflowSaver(store))
        await app.ainvoke({"n": 1, "answer": ""}, {"configurable": {"thread_id": "lg-1"}})

asyncio.run(main())
EOF
run "python $work/lg.py && agentflow history lg-1"
run "agentflow show lg-1"
run "agentflow resume lg-1"

cat > "$work/stores.py" <<'EOF'
"""Stores for the paths below: python stores.py big|ids|alike|long."""
import asyncio, sys
from agentflow.checkpoint import Checkpoint
from agentflow.checkpoint.sqlite import SqliteCheckpointer

def make_checkpoint(thread: str, step: int, state: object = None) -> Checkpoint:
    return Checkpoint(thread=thread, step=step, state=state or {"step": step})

async def main(what: str) -> None:
    async with SqliteCheckpointer(f".runs/{what}.db") as s:
        if what == "big":  # 3,000 threads of 3 steps
            for i in range(3000):
                for step in range(3):
                    await s.put(make_checkpoint(f"t{i:05}", step, state={"pad": "x" * 500}))
        elif what == "ids":  # four ids a file store cannot hold, 46 it can
            for t in ["a/b", "..", ".hidden", "x" * 300, *(f"ok-{i:02}" for i in range(46))]:
                await s.put(make_checkpoint(t, 0))
        elif what == "alike":  # five ids that all look like order-1, a key with a dot
            for t in ["order-1", "order-1\ufe0f", "order-1\U000e0100", "order\u034f-1", "order-\u31641"]:
                for step in (0, 1):
                    state = {"refund.amount": step, "refund": {"amount": step}}
                    await s.put(make_checkpoint(t, step, state=state))
        elif what in ("long", "longer"):  # 1,000 or 3,000 steps of 100 KB
            for step in range(1000 if what == "long" else 3000):
                await s.put(make_checkpoint("long", step, state={"blob": "x" * 100_000, "n": step}))

asyncio.run(main(sys.argv[1]))
EOF
cat > "$work/peak.py" <<'EOF'
"""python peak.py ARGS...: run agentflow ARGS, print its peak memory."""
import resource, subprocess, sys
subprocess.run(["agentflow", *sys.argv[1:]], stdout=subprocess.DEVNULL, check=True)
print(f"peak {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024} MB")
EOF

echo; echo "## long work: copy and rekey, off a terminal, and interrupted"
run "python $work/stores.py big"
run "timeout --preserve-status -s INT 3 agentflow copy sqlite:///.runs/big.db sqlite:///.runs/big-copy.db --concurrency 1 --interval 1 > /dev/null"
run "agentflow copy sqlite:///.runs/big.db sqlite:///.runs/big-copy.db --interval 1 | tail -6"
run "timeout --preserve-status -s INT 3 agentflow --store sqlite:///.runs/big.db --keys-file keys.json rekey --state rekey.state --interval 1 > /dev/null; echo \"rekey exited \$?\"; ls -l rekey.state | cut -c1-10"
run "agentflow --store sqlite:///.runs/big.db --keys-file keys.json rekey --state rekey.state --interval 1 | head -2"

echo; echo "## copy loses nothing: a destination ahead of the source, ids it cannot hold"
run "agentflow demo --thread ahead --hold 0 > /dev/null; agentflow copy sqlite:///.runs/checkpoints.db sqlite:///.runs/old.db --thread ahead | tail -1; agentflow resume ahead --value '\"approve\"' | tail -1"
run "agentflow copy sqlite:///.runs/old.db sqlite:///.runs/checkpoints.db --overwrite | tail -2"
run "agentflow copy sqlite:///.runs/old.db sqlite:///.runs/checkpoints.db --overwrite-newer | sed -n 2p; agentflow show ahead --json | grep -m1 '\"step\"'"
run "python $work/stores.py ids; agentflow copy sqlite:///.runs/ids.db file://.runs/files | sed -n '2p;7,\$p'"

echo; echo "## ids that look alike, keys with a dot, history's memory"
run "python $work/stores.py alike; agentflow --store sqlite:///.runs/alike.db threads"
run "agentflow --store sqlite:///.runs/alike.db threads --json | python -c 'import json,sys; print([ascii(t[\"thread\"]) for t in json.load(sys.stdin)[\"threads\"]])'"
run "agentflow --store sqlite:///.runs/alike.db history order-1 | tail -3"
run "agentflow --store sqlite:///.runs/alike.db diff order-1 0 1"
run "agentflow --store sqlite:///.runs/alike.db diff order-1 0 1 --json | grep path"
run "python $work/stores.py long; python $work/stores.py longer"
for db in long longer; do
  for what in "history long" "history long --json" "show long"; do
    run "python $work/peak.py --store sqlite:///.runs/$db.db $what   # $db.db: $what"
  done
done

echo; echo "## small things"
run "agentflow --version; agentflow reconcile --help | sed -n '/^decisions:/,\$p'"
run "agentflow history --help | sed -n '/^positional/,/^\$/p'; agentflow copy --help | sed -n '/^positional/,/^\$/p'"
run "agentflow demo --thread ''"
run "agentflow --namespace '' threads"
run "agentflow --store sqlite:///.runs/big.db threads --limit 3000 | head -n 1; echo \"agentflow exited \${PIPESTATUS[0]}\""
run "agentflow --store sqlite:///.runs/long.db history long --json | head -c 40; echo; echo \"agentflow exited \${PIPESTATUS[0]}\""
run "agentflow journal refund-1 --json | grep -c idempotency_key"

echo; echo "## the password, searched for in everything printed but the commands typed"
sleep 1  # tee has written what came before
echo "lines printed with S3cret-pw in them: $(grep -v '^\$ ' "$work/transcript.txt" | grep -c 'S3cret-pw')"
