# Sourced by the scripts that build container images without a registry
# or a container engine (nri-plugin/e2e/image.sh, install/image/build.sh):
# a root filesystem directory becomes an OCI image layout, tarred, which
# `ctr -n k8s.io images import` and `skopeo copy oci-archive:...` read.
#
#   oci_image OUT.tar ROOTFS CONFIG CREATED_BY COMPRESS NAME...
#
# CONFIG is the image config's "config" object as JSON (Env, Entrypoint,
# Cmd, Labels, ...); CREATED_BY its history line; COMPRESS gzip or none
# (the layer's encoding); each NAME (registry/repo:tag) an entry of
# index.json naming the one manifest, with the annotations ctr import
# (io.containerd.image.name) and skopeo's oci-archive:PATH:TAG
# (org.opencontainers.image.ref.name, the tag) select it by.
#
# Deterministic: one layer whose tar has sorted names, owner 0, the mtime
# SOURCE_DATE_EPOCH (0 when unset), no atime or ctime, the modes the
# files have in ROOTFS; gzip without name or time; no "created" date
# unless SOURCE_DATE_EPOCH is set. The same ROOTFS and arguments give
# the same bytes, so the same digests.

# oci_dtar ARGS...: GNU tar with the deterministic settings.
oci_dtar() {
	tar --sort=name --mtime="@${SOURCE_DATE_EPOCH:-0}" --owner=0 --group=0 --numeric-owner \
		--format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
		"$@"
}

# oci_blob LAYOUT FILE MEDIATYPE: moves FILE into LAYOUT/blobs/sha256 and
# prints its descriptor.
oci_blob() {
	local sum size
	sum=$(sha256sum "$2" | cut -d' ' -f1)
	size=$(stat -c %s "$2")
	mv "$2" "$1/blobs/sha256/$sum"
	printf '{"mediaType":"%s","digest":"sha256:%s","size":%s}' "$3" "$sum" "$size"
}

# oci_image OUT.tar ROOTFS CONFIG CREATED_BY COMPRESS NAME...
oci_image() {
	local out=$1 rootfs=$2 config=$3 created_by=$4 compress=$5
	shift 5
	local work layout diffid layer cfg manifest created="" n tag
	work=$(mktemp -d)
	layout=$work/layout
	mkdir -p "$layout/blobs/sha256"

	(cd "$rootfs" && oci_dtar -cf "$work/layer.tar" .)
	diffid=sha256:$(sha256sum "$work/layer.tar" | cut -d' ' -f1)
	case $compress in
	none) layer=$(oci_blob "$layout" "$work/layer.tar" application/vnd.oci.image.layer.v1.tar) ;;
	gzip)
		gzip -n -6 "$work/layer.tar"
		layer=$(oci_blob "$layout" "$work/layer.tar.gz" application/vnd.oci.image.layer.v1.tar+gzip)
		;;
	*)
		echo "oci_image: COMPRESS $compress: want gzip or none" >&2
		rm -rf "$work"
		return 2
		;;
	esac

	if [ -n "${SOURCE_DATE_EPOCH:-}" ]; then
		created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
		created="\"created\":\"$created\","
	fi
	printf '{"architecture":"amd64","os":"linux",%s"config":%s,"rootfs":{"type":"layers","diff_ids":["%s"]},"history":[{%s"created_by":"%s"}]}\n' \
		"$created" "$config" "$diffid" "$created" "$created_by" >"$work/config.json"
	cfg=$(oci_blob "$layout" "$work/config.json" application/vnd.oci.image.config.v1+json)

	printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":%s,"layers":[%s]}\n' \
		"$cfg" "$layer" >"$work/manifest.json"
	manifest=$(oci_blob "$layout" "$work/manifest.json" application/vnd.oci.image.manifest.v1+json)

	local entries=()
	for n in "$@"; do
		tag=${n##*:}
		[ "$tag" = "$n" ] || [[ $tag == */* ]] && tag=latest
		entries+=("${manifest%\}},\"platform\":{\"architecture\":\"amd64\",\"os\":\"linux\"},\"annotations\":{\"io.containerd.image.name\":\"$n\",\"org.opencontainers.image.ref.name\":\"$tag\"}}")
	done
	(
		IFS=,
		printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[%s]}\n' \
			"${entries[*]}"
	) >"$layout/index.json"
	printf '{"imageLayoutVersion":"1.0.0"}\n' >"$layout/oci-layout"

	mkdir -p "$(dirname "$out")"
	(cd "$layout" && oci_dtar -cf "$work/image.tar" oci-layout index.json blobs)
	mv "$work/image.tar" "$out"
	rm -rf "$work"
}
