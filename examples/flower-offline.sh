# Sourced by the Flower examples' run.sh: keep Flower offline, give `flwr run` a home of its own, and leave nothing
# behind. Sets the offline variables, FLWR_HOME (a fresh temporary folder unless set; OWN_HOME=1 then), RAY_TMPDIR
# (Ray's session folder inside that home) and PYTHONPATH (the repository, so that the app imports this checkout).
# On exit, and on Ctrl-C or SIGTERM, every process the run started is stopped by PID: `flwr run`, the detached local
# SuperLink it leaves behind (the one whose database lies in this FLWR_HOME), the simulation and Ray below it, and any
# process that carries this FLWR_HOME in its environment (Ray's workers outlive their parents); then the temporary home
# is removed. Stopped, the script says so in one line and exits with status 130.
export FLWR_TELEMETRY_ENABLED=0 FLWR_DISABLE_UPDATE_CHECK=1 FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
export RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=0  # silences a Ray FutureWarning
export RAY_DISABLE_FAILURE_SIGNAL_HANDLER=1  # a stopped Ray process dumps no stack trace on the terminal
if [ -z "${FLWR_HOME:-}" ]; then FLWR_HOME=$(mktemp -d -t hdp-flwr-XXXXXX); OWN_HOME=1; fi
export FLWR_HOME
if [ -n "${OWN_HOME:-}" ] && [ -z "${RAY_TMPDIR:-}" ]; then  # a Unix socket's path holds 107 characters at most
  if [ ${#FLWR_HOME} -le 40 ]; then RAY_TMPDIR=$FLWR_HOME; else RAY_TMPDIR=$(mktemp -d /tmp/hdp-ray-XXXXXX); fi
  export RAY_TMPDIR OWN_RAY=1
fi
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}

# refuse_earlier DIR: stop before anything slow if DIR holds a finished run, unless OVERWRITE=1 asks to replace it.
refuse_earlier() {
  if [ -f "$1/metrics.json" ] && [ -z "${OVERWRITE:-}" ]; then
    echo "error: $1 holds a finished run (metrics.json): choose another OUT=…, or replace it with OVERWRITE=1" >&2
    exit 2
  fi
}

tree_of() {  # the PIDs given and every live process below them
  local all pid found=" $* "
  all=$(ps -eo pid=,ppid=)
  for _ in 1 2 3 4 5 6 7 8; do
    for pid in $(echo "$all" | awk -v found="$found" 'index(found, " " $2 " ") && !index(found, " " $1 " ") {print $1}'); do
      found="$found$pid "
    done
  done
  echo "$found"
}

in_home() {  # every process whose environment holds this run's FLWR_HOME, but this script: Ray's workers among them,
  # which their raylet's end hands to init, out of the tree
  grep -lzxF "FLWR_HOME=$FLWR_HOME" /proc/[0-9]*/environ 2>/dev/null | cut -d/ -f3 | grep -vx "$$" || true
}

stop_run() {
  trap - EXIT INT TERM
  local superlink pids
  superlink=$(pgrep -f "flower-superlink .*$FLWR_HOME/" || true)
  if [ -n "${OWN_HOME:-}" ]; then
    pids=$(tree_of $$ $superlink $(in_home))
    pids=${pids/ $$ / }
    kill -TERM $pids 2>/dev/null || true
    for _ in $(seq 50); do kill -0 $pids 2>/dev/null || break; sleep 0.1; done
    kill -KILL $pids $(in_home) 2>/dev/null || true
    rm -rf "$FLWR_HOME"
    if [ -n "${OWN_RAY:-}" ]; then rm -rf "$RAY_TMPDIR"; fi
  elif [ -n "$superlink" ]; then
    echo "local SuperLink still running: PID $superlink"
  fi
}
trap stop_run EXIT  # also when `flwr run` fails
trap 'stop_run 2>/dev/null; echo "interrupted: the Flower run stopped, its processes too" >&2; exit 130' INT TERM
