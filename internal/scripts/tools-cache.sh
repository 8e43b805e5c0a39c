# Sourced by the scripts that build test tools into a cache outside the
# clone (nri-plugin/e2e/tools.sh, kube-tools.sh, install/helm/tools.sh):
# one build per machine, under a lock, into a temporary directory renamed
# into place whole, so concurrent callers (go test runs packages in
# parallel) wait for one build instead of racing, and an interrupted build
# leaves nothing that looks complete.
#
# The script sets CACHE (the cache's root), KEY (the versions and recipe)
# and BINS (the paths, relative to the build's directory, that make it
# complete), then calls cache_open, builds into $tmp, and calls
# cache_commit. The directory printed on stdout is $CACHE/$KEY/bin.
# CACHE_VAR names the variable that moves the cache (default
# GPUSLICE_E2E_CACHE), for the error when it cannot be created.

DIR=$CACHE/$KEY

# complete DIR: true when every one of BINS is an executable in DIR.
complete() {
	local b
	for b in "${BINS[@]}"; do
		[ -x "$1/$b" ] || return 1
	done
}

# cache_open: when the build is there, prints its bin directory and exits;
# otherwise takes the lock (whoever waited finds the work done), and
# makes $tmp, the build directory, removed on exit unless committed.
cache_open() {
	if complete "$DIR"; then
		echo "$DIR/bin"
		exit 0
	fi
	mkdir -p "$CACHE" || {
		echo "$(basename "$0"): cannot create $CACHE; run as root or set ${CACHE_VAR:-GPUSLICE_E2E_CACHE}" >&2
		exit 1
	}
	exec 9>"$CACHE/$KEY.lock"
	flock 9
	if complete "$DIR"; then
		echo "$DIR/bin"
		exit 0
	fi
	tmp=$(mktemp -d "$CACHE/.build-$KEY.XXXXXX")
	trap 'rm -rf "$tmp"' EXIT
	chmod 0755 "$tmp" # mktemp's 0700 would hide the tools from other users
	start=$SECONDS
}

# cache_commit: checks the build in $tmp is complete, renames it into
# place (a leftover incomplete directory goes first) and prints its bin
# directory.
cache_commit() {
	complete "$tmp" || {
		echo "$(basename "$0"): the build did not produce all of ${BINS[*]}" >&2
		exit 1
	}
	rm -rf "$DIR"
	mv "$tmp" "$DIR"
	trap - EXIT
	echo "$(basename "$0"): built in $((SECONDS - start)) s" >&2
	echo "$DIR/bin"
}
