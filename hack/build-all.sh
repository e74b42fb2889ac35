#!/usr/bin/env bash
# Builds (or reuses) everything `make test` needs from Go modules: the cluster binaries
# (hack/build-binaries.sh), helm, promtool and prometheus (hack/build-tools.sh) and Kueue's manager
# for the ProvisioningRequest end-to-end tests (hack/build-kueue.sh), printing one
# progress line per binary -- what it built, how long it took, what is left -- and sending
# everything Go prints (`go: downloading ...`, compiler output) to a log file instead.
#
# The three scripts are run unchanged (their cache keys hash their own text, so editing them would
# rebuild every cached binary); this wrapper only schedules them and sorts their stderr. By default
# two streams run at once: the cluster binaries, and beside them the tools then Kueue. A go build
# keeps both cores busy while it compiles, but not while it downloads modules or links (the
# linker is mostly one thread, and kube-apiserver's link alone is a minute here), so the second
# stream fills those gaps. Both share Go's build cache (GOCACHE, ~/.cache/go-build by default) and
# module cache: the four Kubernetes binaries compile the packages they share once, and a rebuild
# after a change of pins reuses every package that did not change.
#
#   JOINER_CACHE_DIR      cache root (default: $XDG_CACHE_HOME/joiner or ~/.cache/joiner)
#   JOINER_BUILD_LOG      where Go's output goes (default: $JOINER_CACHE_DIR/build.log)
#   JOINER_BUILD_STREAMS  2 (default): the two streams above at once; 1: one script after another
#
#   bash hack/build-all.sh [binaries] [tools] [kueue]     # default: all three
#
# On a failure it prints the log's last lines and exits non-zero (a stream still building goes on
# in the background, so that the next run finds its binaries cached).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache="${JOINER_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/joiner}"
golog="${JOINER_BUILD_LOG:-$cache/build.log}"
streams="${JOINER_BUILD_STREAMS:-2}"
case "$streams" in 1 | 2) ;; *) echo "JOINER_BUILD_STREAMS must be 1 or 2, not '$streams'" >&2; exit 2 ;; esac
mkdir -p "$(dirname "$golog")"
: >"$golog"

BINARIES=(etcd kwok kube-apiserver kube-scheduler kube-controller-manager kubectl)
TOOLS=(helm promtool prometheus)
KUEUE=(kueue)
start=$(date +%s)
say() { echo "[build $(date +%H:%M:%S)] $*"; }

want=("$@")
[ ${#want[@]} -gt 0 ] || want=(binaries tools kueue)
for w in "${want[@]}"; do
    case "$w" in binaries | tools | kueue) ;; *) echo "usage: $0 [binaries] [tools] [kueue]" >&2; exit 2 ;; esac
done
wanted() { [[ " ${want[*]} " == *" $1 "* ]]; }
wanted binaries || BINARIES=()
wanted tools || TOOLS=()
wanted kueue || KUEUE=()
ALL=("${BINARIES[@]}" "${TOOLS[@]}" "${KUEUE[@]}")

# What is left, shared by the streams: one marker file per binary not built yet, and a lock so
# that marking one done and reading what is left is one step.
left_dir=$(mktemp -d)
trap 'rm -rf "$left_dir"' EXIT
for b in "${ALL[@]}"; do : >"$left_dir/$b"; done
# done_and_left <binary...>: marks them done and prints "N left[: names]" in build order
done_and_left() {
    [ -d "$left_dir" ] || return 0  # a stream that outlived a failed one: nobody reads what is left
    (
        flock 9
        local b names=()
        for b in "$@"; do rm -f "$left_dir/$b"; done
        for b in "${ALL[@]}"; do [ -e "$left_dir/$b" ] && names+=("$b"); done
        echo "${#names[@]} left${names[*]:+: ${names[*]}}"
    ) 9>"$left_dir/.lock"
}

# progress <what the script builds...>: the script's own log lines as one line per binary with
# what is left; everything else (Go's output) goes to the log
progress() {
    local mine=("$@") line name
    while IFS= read -r line; do
        case "$line" in
            "[build-"*)
                if [[ "$line" =~ \]\ built\ ([^ ]+)\ in\ ([0-9]+)\ ?s$ ]]; then
                    name=${BASH_REMATCH[1]%@*}  # the tools say helm@v3.22.0
                    say "built $name in ${BASH_REMATCH[2]}s; $(done_and_left "$name")"
                elif [[ "$line" == *"cached in"* ]]; then
                    say "${line#*] }; $(done_and_left "${mine[@]}")"
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

say "building or reusing ${#ALL[@]} binaries, $streams at a time (Go's output goes to $golog)"
run() { # run <script> <what it builds...>
    local script=$1
    shift
    # the script's stdout (the directory it filled) is not needed; its stderr is sorted above
    if ! bash "$root/hack/$script" 2>&1 >/dev/null | progress "$@"; then
        say "hack/$script failed after $(( $(date +%s) - start ))s; the last lines of $golog:"
        tail -n 40 "$golog" | sed 's/^/    /'
        return 1
    fi
}
cluster() { if wanted binaries; then run build-binaries.sh "${BINARIES[@]}"; fi; }
others() {
    if wanted tools; then run build-tools.sh "${TOOLS[@]}" || return 1; fi
    if wanted kueue; then run build-kueue.sh "${KUEUE[@]}"; fi
}
if [ "$streams" -eq 1 ]; then
    cluster || exit 1
    others || exit 1
else
    cluster &
    others &
    for _ in 1 2; do wait -n || exit 1; done
fi
say "all ready in $(( $(date +%s) - start ))s"
