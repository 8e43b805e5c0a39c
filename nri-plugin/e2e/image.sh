#!/usr/bin/env bash
# Builds, without a registry or a container engine, the one image the
# end-to-end tests use, as an OCI image layout tarred for
# `ctr -n k8s.io image import --platform linux/amd64 OUT.tar`:
#
#   /bin/busybox      Debian's busybox-static (apt-get install
#                     busybox-static when missing and run as root)
#   /bin/<applet>     a symlink to busybox for every applet it has (sh, env,
#                     cat, ls, sleep, mount, test, ...), /sbin and /usr/bin
#                     alike for the few tools that look there
#   /pause            a static C program that waits for SIGTERM/SIGINT and
#                     reaps zombies: the default command (Cmd ["/pause"]),
#                     so the image serves as the CRI sandbox (pause) image
#                     too, and a container started without a command idles
#   /etc/passwd, /etc/group, empty /proc /sys /dev /tmp /run ...
#
# Usage: nri-plugin/e2e/image.sh OUT.tar NAME [NAME...]
#   NAME is the reference CRI knows the image by (for example
#   localhost/gpuslice-e2e:1); each NAME becomes an entry of index.json with
#   the annotation io.containerd.image.name, all pointing at one manifest.
#
# Deterministic: the same busybox and gcc give the same bytes (sorted tar
# entries, fixed owners and times, no "created" dates: the layout is
# internal/scripts/oci-layout.sh's), so the digests are stable. One
# uncompressed layer; takes well under a second.
set -euo pipefail

if [ $# -lt 2 ]; then
	echo "usage: $0 OUT.tar NAME [NAME...]" >&2
	exit 2
fi
out=$1
shift
names=("$@")

# busybox-static: a static busybox at /bin/busybox.
"$(dirname "$0")/../../internal/scripts/apt-need.sh" image.sh busybox-static

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/rootfs
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,etc,proc,sys,dev,tmp,run,root,var/tmp}
chmod 1777 "$root/tmp" "$root/var/tmp"

# busybox and its applets (busybox --list names them without paths).
cp /bin/busybox "$root/bin/busybox"
chmod 0755 "$root/bin/busybox"
for a in $(/bin/busybox --list | sort -u); do
	# The busybox applet itself would be a symlink loop.
	[ "$a" = busybox ] && continue
	ln -s busybox "$root/bin/$a"
done
for a in sh env; do
	ln -s ../../bin/busybox "$root/usr/bin/$a"
done
# Every applet the tests name must be there.
for a in sh env cat ls sleep mount test; do
	[ -L "$root/bin/$a" ] || {
		echo "image.sh: busybox has no $a applet" >&2
		exit 1
	}
done

# /pause: a few lines of C, linked statically so the image needs no libc.
cat >"$work/pause.c" <<'EOF'
/* pause: the sandbox's PID 1. Exits 0 on SIGINT or SIGTERM, reaps any
 * child re-parented to it, and otherwise sleeps. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

static void on_stop(int sig) { (void)sig; stop = 1; }
static void on_child(int sig) { (void)sig; while (waitpid(-1, 0, WNOHANG) > 0) ; }

int main(void)
{
	struct sigaction sa = { .sa_handler = on_stop };
	sigaction(SIGINT, &sa, 0);
	sigaction(SIGTERM, &sa, 0);
	sa.sa_handler = on_child;
	sa.sa_flags = SA_NOCLDSTOP;
	sigaction(SIGCHLD, &sa, 0);
	while (!stop)
		pause();
	return 0;
}
EOF
gcc -static -O2 -s -o "$root/pause" "$work/pause.c"

printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' \
	>"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"

# The layout (internal/scripts/oci-layout.sh): one uncompressed layer, so
# its digest is its diff_id.
# shellcheck source=../../internal/scripts/oci-layout.sh
. "$(dirname "$0")/../../internal/scripts/oci-layout.sh"
oci_image "$out" "$root" \
	'{"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],"Cmd":["/pause"],"WorkingDir":"/"}' \
	nri-plugin/e2e/image.sh none "${names[@]}"
