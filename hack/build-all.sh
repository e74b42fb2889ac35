#!/usr/bin/env bash
# Builds (or reuses) everything `make test` needs from Go modules: the cluster binaries
# (hack/build-binaries.sh), helm, promtool and prometheus (hack/build-tools.sh) and Kueue's manager
# for the ProvisioningRequest end-to-end tests (hack/build-kueue.sh), printing one
# progress line per binary -- what it built, how long it took, what is left -- and sending
# everything Go prints (`go: downloading ...`, compiler output) to a log file instead.
#
# The two scripts are run unchanged (their cache keys hash their own text, so editing them would
# rebuild every cached binary); this wrapper only sorts their stderr. They build one after the
# other and share Go's build cache (GOCACHE, ~/.cache/go-build by default) and module cache, so
# the four Kubernetes binaries compile the packages they share once, and a rebuild after a change
# of pins reuses every package that did not change.
#
#   JOINER_CACHE_DIR   cache root (default: $XDG_CACHE_HOME/joiner or ~/.cache/joiner)
#   JOINER_BUILD_LOG   where Go's output goes (default: $JOINER_CACHE_DIR/build.log)
#
#   bash hack/build-all.sh [binaries] [tools] [kueue]     # default: all three
#
# On a failure it prints the log's last lines and exits non-zero.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache="${JOINER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/joiner}"
golog="${JOINER_BUILD_LOG:-$cache/build.log}"
mkdir -p "$(dirname "$golog")"
: >"$golog"

BINARIES=(etcd kwok kube-apiserver kube-scheduler kube-controller-manager kubectl)
TOOLS=(helm promtool prometheus)
KUEUE=(kueue)
start=$(date +%s)
say() { echo "[build $(date +%H:%M:%S)] $*"; }

# progress <what the script builds> -- <what later scripts build>: the script's own log lines as
# one line per binary with what is left; everything else (Go's output) goes to the log
progress() {
    local mine=() later=() line name b rest
    while [ "$1" != "--" ]; do mine+=("$1"); shift; done
    shift
    later=("$@")
    while IFS= read -r line; do
        case "$line" in
            "[build-"*)
                if [[ "$line" =~ \]\ built\ ([^ ]+)\ in\ ([0-9]+)\ ?s$ ]]; then
                    name=${BASH_REMATCH[1]%@*}  # the tools say helm@v3.22.0
                    rest=()
                    for b in "${mine[@]}"; do [ "$b" != "$name" ] && rest+=("$b"); done
                    mine=("${rest[@]}")
                    rest=("${mine[@]}" "${later[@]}")
                    say "built $name in ${BASH_REMATCH[2]}s; ${#rest[@]} left${rest[*]:+: ${rest[*]}}"
                elif [[ "$line" == *"cached in"* ]]; then
                    say "${line#*] }; ${#later[@]} left${later[*]:+: ${later[*]}}"
                elif [[ "$line" == *"] building "* || "$line" == *"modules"* || "$line" == *"] done in"* || "$line" == *"] all binaries built"* ]]; then
                    echo "$line" >>"$golog"  # the step it starts or ends: in the log, beside Go's output
                else
                    say "${line#*] }"
                fi
                ;;
            *) echo "$line" >>"$golog" ;;
        esac
    done
}

want=("$@")
[ ${#want[@]} -gt 0 ] || want=(binaries tools kueue)
for w in "${want[@]}"; do
    case "$w" in binaries | tools | kueue) ;; *) echo "usage: $0 [binaries] [tools] [kueue]" >&2; exit 2 ;; esac
done
wanted() { [[ " ${want[*]} " == *" $1 "* ]]; }
wanted binaries || BINARIES=()
wanted tools || TOOLS=()
wanted kueue || KUEUE=()
say "building or reusing $(( ${#BINARIES[@]} + ${#TOOLS[@]} + ${#KUEUE[@]} )) binaries (Go's output goes to $golog)"
run() { # run <script> <what it builds...> -- <what later scripts build...>
    local script=$1
    shift
    # the script's stdout (the directory it filled) is not needed; its stderr is sorted above
    if ! bash "$root/hack/$script" 2>&1 >/dev/null | progress "$@"; then
        say "hack/$script failed after $(( $(date +%s) - start ))s; the last lines of $golog:"
        tail -n 40 "$golog" | sed 's/^/    /'
        exit 1
    fi
}
if wanted binaries; then run build-binaries.sh "${BINARIES[@]}" -- "${TOOLS[@]}" "${KUEUE[@]}"; fi
if wanted tools; then run build-tools.sh "${TOOLS[@]}" -- "${KUEUE[@]}"; fi
if wanted kueue; then run build-kueue.sh "${KUEUE[@]}" --; fi
say "all ready in $(( $(date +%s) - start ))s"
