# Sourced by the Flower examples' run.sh: keep Flower offline and give `flwr run` a home of its own.
# Sets the offline variables, FLWR_HOME (a fresh temporary folder unless set; OWN_HOME=1 then) and PYTHONPATH (the
# repository, so that the app imports this checkout); on exit, stop_superlink stops the detached local SuperLink
# that `flwr run` leaves behind (by PID, when this script made FLWR_HOME; else it says which one it is).
export FLWR_TELEMETRY_ENABLED=0 FLWR_DISABLE_UPDATE_CHECK=1 FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
export RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=0  # silences a Ray FutureWarning
if [ -z "${FLWR_HOME:-}" ]; then FLWR_HOME=$(mktemp -d -t hdp-flwr-XXXXXX); OWN_HOME=1; fi
export FLWR_HOME
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}

stop_superlink() {
  for pid in $(pgrep -f "flower-superlink .*$FLWR_HOME/" || true); do
    if [ -n "${OWN_HOME:-}" ]; then kill "$pid"; else echo "local SuperLink still running: PID $pid"; fi
  done
}
trap stop_superlink EXIT  # also when `flwr run` fails
