#!/usr/bin/env bash
# Submit the quickstart to a running Ray cluster as a Ray job.
#
#   RAY_ADDRESS=http://127.0.0.1:8265 examples/submit_job.sh [extra pipeline run args]
#
# RAY_ADDRESS is the cluster's job-server (dashboard) address. Ray 2.60 turns token
# authentication on by default: the client reads the token from ~/.ray/auth_token on the head
# node, or from RAY_AUTH_TOKEN / RAY_AUTH_TOKEN_PATH elsewhere (copy it from the head node with
# `ray get-auth-token`). The job's output directory is printed in its logs
# (`ray job logs <id>`) and lands under the job's working directory on the head node unless
# --output points elsewhere (shared storage on a multi-node cluster).
set -euo pipefail
cd "$(dirname "$0")/.."
: "${RAY_ADDRESS:?set RAY_ADDRESS to the cluster's job server, e.g. http://127.0.0.1:8265}"
# The Ray 2.60 client sends the token only in token mode.
export RAY_AUTH_MODE="${RAY_AUTH_MODE:-token}"
exec ray job submit --address "$RAY_ADDRESS" --working-dir . \
  --runtime-env-json '{"excludes": ["runs/", ".git/"]}' \
  -- pipeline run examples/quickstart.yaml "$@"
