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

adds_inline_ignores() {  # the pull request adds a line with a `# trl-doctor: ignore` comment to any file
  # Every added line that holds "trl-doctor:" and then "ignore" (a superset of what trl_doctor/front/suppress.py
  # reads as a directive, whatever white space is between), in any file, as text: a .gitattributes of the pull
  # request's (`-diff`, `binary`, a textconv driver) cannot make git print "Binary files differ" instead.
  # (read whole before grep: `grep -q | ` under pipefail reads a big diff's early exit as no match)
  local added
  added=$(git -c core.quotePath=false diff --text --no-textconv --no-ext-diff --no-color --unified=0 --no-renames \
    "$base") || return 0  # no diff to read: as if it added one (the check is isolated)
  LC_ALL=C grep -aqE '^\+.*trl-doctor:.*ignore' <<< "$added"  # bytes: no encoding stops `.*`
}

shown() {  # a path from the pull request, fit for the log: no control character, no `::` and no `##[` anywhere
  local s=${1//[[:cntrl:]]/?}  # (the runner acts on `##[cmd]` mid-line; a newline would start a line of its own)
  while [[ $s == *::* ]]; do s=${s/::/:\\:}; done
  while [[ $s == *'##['* ]]; do s=${s/'##['/'#\#['}; done
  printf '%s' "$s"
}

through_a_link() {  # a folder on the way to $1 is a symbolic link: writing there could land outside the workspace
  local dir
  dir=$(dirname -- "$1")
  while [ "$dir" != . ] && [ "$dir" != / ]; do
    if [ -L "$dir" ]; then return 0; fi
    dir=$(dirname -- "$dir")
  done
  return 1
}

use_base() {
  mkdir -p "$saved"
  for file in "$@"; do
    echo "trl-doctor: this pull request changes $(shown "$file"); the check reads it as it is on the base branch"
    if [ -e "$file" ] || [ -L "$file" ]; then
      mkdir -p "$saved/$(dirname "$file")"
      cp -P -p "$file" "$saved/$file"  # a symlink is kept as the link, never followed
    fi
    printf '%s\0' "$file" >> "$saved.list"
    rm -f "$file"  # never written through: a symlink the pull request made could point outside the workspace
    if git cat-file -e "$base:$file" 2>/dev/null; then
      mkdir -p "$(dirname -- "$file")"  # a folder the pull request removed
      git show "$base:$file" > "$file"
    fi
  done
}

linked() {  # one of the files is reached through a linked folder (never written through: the check is isolated)
  local file
  for file in "$@"; do if through_a_link "$file"; then return 0; fi; done
  return 1
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
        echo "trl-doctor: this pull request changes the project config ($(shown "${files[*]}")); the check ignores it"
        isolated=true
      elif linked "${files[@]}"; then
        echo "trl-doctor: this pull request puts a project config behind a symbolic link to a folder; the check ignores project config and inline suppressions"
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
    if through_a_link "$file"; then continue; fi  # a folder made a link since prepare: never written through
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
