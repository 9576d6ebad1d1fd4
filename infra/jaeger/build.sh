#!/usr/bin/env bash
# Builds Jaeger (v2, the OpenTelemetry-Collector-based all-in-one: an OTLP
# receiver, in-memory storage and the query API/UI in one binary) from the Go
# module proxy, once, into the cache; the tracing tests run it as their real
# OTLP receiver. Prints the binary's path. ~5-10 min on 2 cores the first time;
# afterwards it only prints the cached path.
#
#   TURNSTREAM_CACHE  where binaries are cached (default ~/.cache/turnstream)
set -euo pipefail

version=v1.75.0   # the module's v1 tag of Jaeger v2 (cmd/jaeger)
cache="${TURNSTREAM_CACHE:-${HOME}/.cache/turnstream}"
binary="${cache}/jaeger-${version}"
if [[ -x "${binary}" ]]; then
  echo "${binary}"
  exit 0
fi
command -v go >/dev/null || { echo "building Jaeger needs Go on PATH" >&2; exit 1; }
work="${cache}/jaeger-build-${version}"
mkdir -p "${work}"
here="$(cd "$(dirname "$0")" && pwd)"
# go.mod and go.sum here pin the whole dependency tree; the build happens in
# the cache so the checkout stays clean.
cp "${here}/go.mod" "${here}/go.sum" "${work}/"
(cd "${work}" && GOFLAGS=-mod=mod go build -o "${binary}.tmp" github.com/jaegertracing/jaeger/cmd/jaeger) >&2
mv "${binary}.tmp" "${binary}"
echo "${binary}"
