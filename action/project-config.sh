#!/usr/bin/env bash
# Which project config (.trl-doctor.toml, pyproject.toml's [tool.trl-doctor]) a pull request's check reads, so that
# a pull request cannot silence its own gate (action.yml's `project-config` input, TRL_DOCTOR_PROJECT_CONFIG):
#   base            (default) the files the pull request changes are checked as they are on the base branch;
#                   `restore` puts the pull request's versions back afterwards (a symlink is replaced, never written
#                   through); a pull request that adds a `# trl-doctor: ignore` comment is checked isolated
#   ignore-changed  when the pull request changes one, the check ignores all project config (--isolated)
#   isolated        the check always ignores project config and inline suppressions
#   pr              the pull request's own files
# In base and ignore-changed modes a symbolic link the pull request adds or retargets is an error annotation and
# isolates the check (links=N in $GITHUB_OUTPUT: check.sh fails the gate on it); in base mode a project config that
# is a link on the base branch is replaced by the base branch's file it leads to (put back by `restore`).
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

put_base() {  # put_base FILE FROM: FILE becomes a plain file holding FROM as it is on the base branch (none if absent)
  local file=$1 from=$2
  mkdir -p "$saved"
  if [ -e "$file" ] || [ -L "$file" ]; then
    mkdir -p "$saved/$(dirname "$file")"
    cp -P -p "$file" "$saved/$file"  # a symlink is kept as the link, never followed
  fi
  printf '%s\0' "$file" >> "$saved.list"
  rm -f "$file"  # never written through: a symlink the pull request made could point outside the workspace
  if git cat-file -e "$base:$from" 2>/dev/null; then
    mkdir -p "$(dirname -- "$file")"  # a folder the pull request removed
    git show "$base:$from" > "$file"
  fi
}

use_base() {
  for file in "$@"; do
    echo "trl-doctor: this pull request changes $(shown "$file"); the check reads it as it is on the base branch"
    put_base "$file" "$file"
  done
}

pr_links() {  # NUL-separated: the symbolic links the pull request adds, or makes of a file, or points elsewhere
  local meta path
  while IFS= read -r -d '' meta && IFS= read -r -d '' path; do
    read -r _ new _ <<< "${meta#:}"  # ":OLDMODE NEWMODE OLDSHA NEWSHA STATUS"
    if [ "$new" = 120000 ]; then printf '%s\0' "$path"; fi
  done < <(git -c core.quotePath=false diff --raw -z --no-renames "$base")
}

base_linked_configs() {  # NUL-separated: the project config files that are symbolic links on the base branch
  local record meta path
  while IFS= read -r -d '' record; do
    meta=${record%%$'\t'*}
    path=${record#*$'\t'}
    case "${path##*/}" in
      .trl-doctor.toml | pyproject.toml) if [ "${meta%% *}" = 120000 ]; then printf '%s\0' "$path"; fi ;;
    esac
  done < <(git -c core.quotePath=false ls-tree -r -z "$base")
}

in_base() {  # in_base PATH: the path within the repository that PATH leads to on the base branch, its links
  local path=$1 hops=0 target mode  # followed there (8 at most); fails for a link out of the repository
  while [ "$hops" -lt 8 ]; do
    mode=$(git ls-tree -z "$base" -- "$path" | cut -d' ' -f1)
    if [ "$mode" != 120000 ]; then printf '%s' "$path"; return 0; fi
    target=$(git cat-file -p "$base:$path")
    case "$target" in /*) return 1 ;; esac
    path=$(python3 -c 'import os, sys; print(os.path.normpath(os.path.join(os.path.dirname(sys.argv[1]), sys.argv[2])), end="")' \
      "$path" "$target") || return 1
    case "$path" in .. | ../*) return 1 ;; esac
    hops=$((hops + 1))
  done
  return 1
}

without() {  # without N A1..AN B...: NUL-separated, each B that is none of the A's
  local n=$1 b a found
  shift
  local drop=("${@:1:n}")
  for b in "${@:n+1}"; do
    found=0
    for a in "${drop[@]}"; do if [ "$a" = "$b" ]; then found=1; break; fi; done
    if [ "$found" = 0 ]; then printf '%s\0' "$b"; fi
  done
}

annotate() {  # a workflow error annotation of ours; its text from the pull request escaped as the runner asks
  local text=$1
  text=${text//%/%25}
  printf '::error::%s\n' "$text"
}

linked() {  # one of the files is reached through a linked folder (never written through: the check is isolated)
  local file
  for file in "$@"; do if through_a_link "$file"; then return 0; fi; done
  return 1
}

prepare() {
  local isolated=false files=() links=() linked_configs=() file from
  case "$mode" in
    pr) ;;
    isolated) isolated=true ;;
    base | ignore-changed)
      if [ -n "$base" ]; then
        git cat-file -e "$base^{commit}" 2>/dev/null || git fetch --no-tags --depth=1 origin "$base"
        mapfile -d '' -t files < <(changed)
        mapfile -d '' -t links < <(pr_links)
        mapfile -d '' -t linked_configs < <(base_linked_configs)
        if adds_inline_ignores; then
          echo "trl-doctor: this pull request adds a '# trl-doctor: ignore' comment; the check ignores project config and inline suppressions"
          isolated=true
        fi
      fi
      # A link the pull request makes is a finding of its own (the gate fails on it): through it, the paths the
      # check is given would lead to files, folders or a project config the base branch does not put there.
      for file in ${links[@]+"${links[@]}"}; do
        annotate "trl-doctor: this pull request adds or changes a symbolic link, $(shown "$file") -> $(shown "$(readlink -- "$file" || true)"): the gate follows no link a pull request makes; the check ignores project config and inline suppressions, and the gate fails"
        isolated=true
      done
      echo "links=${#links[@]}" >> "${GITHUB_OUTPUT:-/dev/null}"
      if [ "$isolated" != true ] && [ "$mode" = base ]; then
        # a project config that is a link on the base branch: read as the base branch's file it leads to, so a
        # pull request that edits that file (whatever its name) changes nothing
        for file in ${linked_configs[@]+"${linked_configs[@]}"}; do
          if through_a_link "$file" || ! from=$(in_base "$file"); then
            echo "trl-doctor: the base branch's $(shown "$file") is a link the check cannot follow within the repository; the check ignores project config"
            isolated=true
            break
          fi
          echo "trl-doctor: $(shown "$file") is a link on the base branch; the check reads $(shown "$from") as it is there"
          put_base "$file" "$from"
        done
        if [ "${#linked_configs[@]}" -gt 0 ] && [ "${#files[@]}" -gt 0 ]; then  # each file put back once
          mapfile -d '' -t files < <(without "${#linked_configs[@]}" "${linked_configs[@]}" "${files[@]}")
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
