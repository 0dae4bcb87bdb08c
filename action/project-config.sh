#!/usr/bin/env bash
# Which project config (.trl-doctor.toml, pyproject.toml's [tool.trl-doctor]) a pull request's check reads, so that
# a pull request cannot silence its own gate (action.yml's `project-config` input, TRL_DOCTOR_PROJECT_CONFIG):
#   base            (default) the files the pull request changes are checked as they are on the base branch;
#                   `restore` puts the pull request's versions back afterwards
#   ignore-changed  when the pull request changes one, the check ignores all project config (--isolated)
#   isolated        the check always ignores project config and inline suppressions
#   pr              the pull request's own files
# Outside a pull request (TRL_DOCTOR_BASE_SHA empty) the checked-out files are used.
# Usage: project-config.sh prepare | restore. `prepare` writes isolated=true|false to $GITHUB_OUTPUT.
set -euo pipefail

mode="${TRL_DOCTOR_PROJECT_CONFIG:-base}"
base="${TRL_DOCTOR_BASE_SHA:-}"
saved="${RUNNER_TEMP:-${TMPDIR:-/tmp}}/trl-doctor-pr-config"

changed() {
  git diff --name-only --no-renames "$base" -- ':(glob)**/.trl-doctor.toml' ':(glob)**/pyproject.toml'
}

use_base() {
  mkdir -p "$saved"
  for file in "$@"; do
    echo "trl-doctor: this pull request changes $file; the check reads it as it is on the base branch"
    if [ -e "$file" ]; then
      mkdir -p "$saved/$(dirname "$file")"
      cp -p "$file" "$saved/$file"
    fi
    printf '%s\n' "$file" >> "$saved.list"
    if git cat-file -e "$base:$file" 2>/dev/null; then git show "$base:$file" > "$file"; else rm -f "$file"; fi
  done
}

prepare() {
  local isolated=false files=()
  case "$mode" in
    pr) ;;
    isolated) isolated=true ;;
    base | ignore-changed)
      if [ -n "$base" ]; then
        git cat-file -e "$base^{commit}" 2>/dev/null || git fetch --no-tags --depth=1 origin "$base"
        mapfile -t files < <(changed)
      fi
      if [ "${#files[@]}" -gt 0 ] && [ "$mode" = ignore-changed ]; then
        echo "trl-doctor: this pull request changes the project config (${files[*]}); the check ignores it"
        isolated=true
      elif [ "${#files[@]}" -gt 0 ]; then
        use_base "${files[@]}"
      fi
      ;;
    *)
      echo "trl-doctor: project-config must be base, ignore-changed, isolated or pr" >&2
      exit 2
      ;;
  esac
  echo "isolated=$isolated" >> "${GITHUB_OUTPUT:-/dev/null}"
}

restore() {
  [ -f "$saved.list" ] || return 0
  while IFS= read -r file; do
    if [ -e "$saved/$file" ]; then cp -p "$saved/$file" "$file"; else rm -f "$file"; fi
  done < "$saved.list"
  rm -rf "$saved" "$saved.list"
}

case "${1:-}" in
  prepare) prepare ;;
  restore) restore ;;
  *) echo "usage: project-config.sh prepare | restore" >&2; exit 2 ;;
esac
