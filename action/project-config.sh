#!/usr/bin/env bash
# Which project config (.trl-doctor.toml, pyproject.toml's [tool.trl-doctor]) a pull request's check reads, so that
# a pull request cannot silence its own gate (action.yml's `project-config` input, TRL_DOCTOR_PROJECT_CONFIG):
#   base            (default) the files the pull request changes are checked as they are on the base branch;
#                   `restore` puts the pull request's versions back afterwards (a symlink is replaced, never written
#                   through); a pull request that adds a `# trl-doctor: ignore` comment is checked isolated
#   ignore-changed  when the pull request changes one, the check ignores all project config (--isolated)
#   isolated        the check always ignores project config and inline suppressions
#   pr              the pull request's own files
# Outside a pull request (TRL_DOCTOR_BASE_SHA empty) the checked-out files are used.
# Usage: project-config.sh prepare | restore. `prepare` writes isolated=true|false to $GITHUB_OUTPUT.
set -euo pipefail

mode="${TRL_DOCTOR_PROJECT_CONFIG:-base}"
base="${TRL_DOCTOR_BASE_SHA:-}"
saved="${RUNNER_TEMP:-${TMPDIR:-/tmp}}/trl-doctor-pr-config"

changed() {  # NUL-separated, unquoted: a path with non-ASCII characters is printed as it is
  git -c core.quotePath=false diff -z --name-only --no-renames "$base" -- ':(glob)**/.trl-doctor.toml' \
    ':(glob)**/pyproject.toml'
}

adds_inline_ignores() {  # the pull request adds a `# trl-doctor: ignore` line to any file
  local added
  added=$(git -c core.quotePath=false diff --unified=0 --no-renames "$base" | awk '/^\+\+\+ /{next} /^\+/{print}')
  grep -qE '#[[:space:]]*trl-doctor:[[:space:]]*ignore' <<< "$added"
}

use_base() {
  mkdir -p "$saved"
  for file in "$@"; do
    echo "trl-doctor: this pull request changes $file; the check reads it as it is on the base branch"
    if [ -e "$file" ] || [ -L "$file" ]; then
      mkdir -p "$saved/$(dirname "$file")"
      cp -P -p "$file" "$saved/$file"  # a symlink is kept as the link, never followed
    fi
    printf '%s\0' "$file" >> "$saved.list"
    rm -f "$file"  # never written through: a symlink the pull request made could point outside the workspace
    if git cat-file -e "$base:$file" 2>/dev/null; then git show "$base:$file" > "$file"; fi
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
        mapfile -d '' -t files < <(changed)
        if adds_inline_ignores; then
          echo "trl-doctor: this pull request adds a '# trl-doctor: ignore' comment; the check ignores project config and inline suppressions"
          isolated=true
        fi
      fi
      if [ "$isolated" = true ]; then
        :
      elif [ "${#files[@]}" -gt 0 ] && [ "$mode" = ignore-changed ]; then
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
  while IFS= read -r -d '' file; do
    rm -f "$file"
    if [ -e "$saved/$file" ] || [ -L "$saved/$file" ]; then cp -P -p "$saved/$file" "$file"; fi
  done < "$saved.list"
  rm -rf "$saved" "$saved.list"
}

case "${1:-}" in
  prepare) prepare ;;
  restore) restore ;;
  *) echo "usage: project-config.sh prepare | restore" >&2; exit 2 ;;
esac
