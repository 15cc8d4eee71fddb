#!/usr/bin/env bash
# Makes `docker compose` available for the compose-file tests (tests/test_compose.py), which
# validate docker/compose*.yml with `docker compose config` (no Docker engine needed).
# * No docker client: nothing to do (those tests are skipped: there is no docker to use).
# * The client has its compose plugin: nothing to do.
# * Otherwise: builds the pinned Compose release from the Go module proxy into
#   .toplist/docker/cli-plugins/ (once; ~2 minutes on 2 cores), which the tests use through
#   DOCKER_CONFIG=.toplist/docker. Needs Go.
set -euo pipefail
cd "$(dirname "$0")/.."
COMPOSE_MODULE=github.com/docker/compose/v5
COMPOSE_VERSION=v5.6.0
plugin_dir="$PWD/.toplist/docker/cli-plugins"
command -v docker >/dev/null || { echo "no docker client: the compose-file tests will be skipped"; exit 0; }
docker compose version >/dev/null 2>&1 && exit 0
[ -x "$plugin_dir/docker-compose" ] && exit 0
command -v go >/dev/null || { echo "docker compose is missing and Go is not installed to build it" >&2; exit 1; }
echo "building docker compose $COMPOSE_VERSION from the Go module proxy (once)"
export GOPATH="$PWD/.toplist/go" GOFLAGS=-modcacherw
source_dir=$(go mod download -json "$COMPOSE_MODULE@$COMPOSE_VERSION" \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
mkdir -p "$plugin_dir"
(cd "$source_dir" && go build -trimpath -o "$plugin_dir/docker-compose.tmp" ./cmd)
mv "$plugin_dir/docker-compose.tmp" "$plugin_dir/docker-compose"
DOCKER_CONFIG="$PWD/.toplist/docker" docker compose version
