#!/usr/bin/env bash
# deploy.sh OVERLAY — what the CI job runs: fke deploy of one overlay of
# the model-serving app, with the target cluster's kubeconfig taken from
# $KUBECONFIG_DATA (a CI secret). No management plane is needed. Exits 0
# only when every object is Current; a deploy that does not get there is
# rolled back to the last healthy revision and the job fails with the
# reason.
set -euo pipefail
overlay=${1:?usage: deploy.sh OVERLAY (overlays/dev or overlays/prod)}
: "${KUBECONFIG_DATA:?set KUBECONFIG_DATA to the kubeconfig of the target cluster}"
kubeconfig=$(mktemp)
trap 'rm -f "$kubeconfig"' EXIT
printf '%s\n' "$KUBECONFIG_DATA" >"$kubeconfig"

fke deploy -f "$overlay" --kubeconfig "$kubeconfig" --name model-serving \
  --prune --wait --timeout "${DEPLOY_TIMEOUT:-5m}" --rollback-on-failure
fke releases --kubeconfig "$kubeconfig" --name model-serving
