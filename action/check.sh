#!/usr/bin/env bash
# The action's check (action.yml): trl-doctor runs once over every config and writes every format from that one
# result: the github annotations on stdout, SARIF (and JUnit when asked) to files. Inputs arrive in the
# environment, never in the script's text, so a config name or an option string from a pull request is data:
#   TRL_DOCTOR_CONFIGS  config files or globs, space-separated (globs are expanded by trl-doctor, not the shell)
#   TRL_DOCTOR_ARGS     other options, space-separated (split on spaces, never evaluated)
#   TRL_DOCTOR_TARGET   the launch machine's GPUs, or empty
#   TRL_DOCTOR_SARIF    where the SARIF report goes; TRL_DOCTOR_JUNIT: the JUnit report, or empty
#   TRL_DOCTOR_ISOLATED true: no project config and no inline suppressions (project-config.sh decides)
#   TRL_DOCTOR_PR_LINKS the symbolic links the pull request makes (project-config.sh counts them): any fails the gate
# The exit status goes to $GITHUB_OUTPUT as status=N; the step itself succeeds (the action's last step fails the
# job), so the SARIF upload runs on every status, 2 included.
set -uo pipefail

# every line of a multi-line input, split on white space (read -a alone reads the first line only)
words() { printf '%s\n' "$1" | tr -s '[:space:]' '\n' | sed '/^$/d'; }  # CRLF lines too
mapfile -t configs < <(words "${TRL_DOCTOR_CONFIGS:-}")
mapfile -t args < <(words "${TRL_DOCTOR_ARGS:-}")
# a config name is a file name, never an option: one that starts with "-" is given as ./-name
for i in "${!configs[@]}"; do
  case "${configs[i]}" in -*) configs[i]="./${configs[i]}" ;; esac
done
extra=(--format github --report "sarif=${TRL_DOCTOR_SARIF:-trl-doctor.sarif}")
if [ -n "${TRL_DOCTOR_JUNIT:-}" ]; then extra+=(--report "junit=$TRL_DOCTOR_JUNIT"); fi
if [ -n "${TRL_DOCTOR_TARGET:-}" ]; then extra+=(--target "$TRL_DOCTOR_TARGET"); fi
if [ "${TRL_DOCTOR_ISOLATED:-false}" = true ]; then extra+=(--isolated); fi

unlinked() {  # a link the pull request put at a report's path, or at a folder of a relative one, is removed: a report
  local path=$1  # is never written through a link of the checkout (it could lead out of the workspace)
  while [ "$path" != . ] && [ "$path" != / ]; do
    if [ -L "$path" ]; then rm -f -- "$path"; fi
    case "$path" in /*) break ;; esac  # an absolute path's folders are the workflow's (on macOS /tmp is a link)
    path=$(dirname -- "$path")
  done
}
sarif="${TRL_DOCTOR_SARIF:-trl-doctor.sarif}"
for report in "$sarif" "${TRL_DOCTOR_JUNIT:-}"; do
  if [ -n "$report" ]; then unlinked "$report"; fi
done
mkdir -p "$(dirname -- "$sarif")"  # the fallback below writes there too
trl-doctor check "${args[@]}" "${extra[@]}" "${configs[@]}"
status=$?
# a symbolic link the pull request makes (project-config.sh said which, as an error annotation) fails the gate
if [ "$status" -eq 0 ] && [ "${TRL_DOCTOR_PR_LINKS:-0}" != 0 ]; then status=1; fi
if [ ! -s "$sarif" ]; then  # options trl-doctor refused before any check: still a document to upload
  # shellcheck disable=SC2016  # the literal "$schema" key of a SARIF document
  printf '%s\n' '{"$schema": "https://json.schemastore.org/sarif-2.1.0.json", "version": "2.1.0", "runs": [{"tool": {"driver": {"name": "trl-doctor", "rules": []}}, "invocations": [{"executionSuccessful": false}], "results": []}]}' > "$sarif"
fi
echo "status=$status" >> "${GITHUB_OUTPUT:-/dev/null}"
