#!/usr/bin/env python3
"""Assemble the operator's OCI image from files, with no container engine
and no network, reproducibly: the same inputs give the same
image digest.

One layer: /openmed-operator (the static binary), /etc/passwd and /etc/group
(root and nonroot 65532, the files scripts/rootfs/ holds, as the
Containerfile copies them), /usr/share/doc/openmed-operator/LICENSE and
sbom.cdx.json. The config runs the entrypoint as 65532:65532 and carries the
OCI labels. Written as an OCI image layout (LAYOUT/) and as an oci-archive
(a tar of that layout), tagged with the version; every time stamp is
SOURCE_DATE_EPOCH, every owner 0, every name sorted, gzip without a name or
time.

Usage: scripts/oci_image.py BINARY SBOM LAYOUT_DIR ARCHIVE
Environment: VERSION, REVISION, SOURCE_DATE_EPOCH, IMAGE_NAME.
"""
import gzip
import hashlib
import io
import json
import os
import shutil
import sys
import tarfile
from datetime import datetime, timezone

ROOTFS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rootfs")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = "usr/share/doc/openmed-operator"


def tar_bytes(entries, mtime):
    """A tar of (path, mode, bytes or None for a directory), in order."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, mode, data in entries:
            info = tarfile.TarInfo(path)
            info.mode, info.mtime = mode, mtime
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def read(path):
    with open(path, "rb") as f:
        return f.read()


def layer(binary, sbom, mtime):
    files = [
        ("etc", 0o755, None),
        ("etc/group", 0o644, read(os.path.join(ROOTFS, "etc/group"))),
        ("etc/passwd", 0o644, read(os.path.join(ROOTFS, "etc/passwd"))),
        ("openmed-operator", 0o755, read(binary)),
        ("usr", 0o755, None),
        ("usr/share", 0o755, None),
        ("usr/share/doc", 0o755, None),
        (DOC, 0o755, None),
        (f"{DOC}/LICENSE", 0o644, read(os.path.join(REPO, "LICENSE"))),
        (f"{DOC}/sbom.cdx.json", 0o644, read(sbom)),
    ]
    return tar_bytes(files, mtime)


def digest(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def main(binary, sbom, layout, archive):
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
    created = datetime.fromtimestamp(epoch, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    version = os.environ.get("VERSION", "0.0.0")
    name = os.environ.get("IMAGE_NAME", "ghcr.io/openmed-ai/openmed-operator")
    labels = {
        "org.opencontainers.image.title": "openmed-operator",
        "org.opencontainers.image.description":
            "Makes the model version served by an OpenMed REST Deployment declarative",
        "org.opencontainers.image.source": "https://github.com/openmed-ai/openmed-operator",
        "org.opencontainers.image.revision": os.environ.get("REVISION", "unknown"),
        "org.opencontainers.image.version": version,
        "org.opencontainers.image.licenses": "Apache-2.0",
        "org.opencontainers.image.created": created,
    }
    tar = layer(binary, sbom, epoch)
    gz = gzip.compress(tar, compresslevel=9, mtime=0)
    config = json.dumps({
        "architecture": "amd64",
        "os": "linux",
        "created": created,
        "config": {
            "User": "65532:65532",
            "Entrypoint": ["/openmed-operator"],
            "WorkingDir": "/",
            "ExposedPorts": {"8080/tcp": {}, "8443/tcp": {}},
            "Labels": labels,
        },
        "rootfs": {"type": "layers", "diff_ids": [digest(tar)]},
        "history": [{"created": created, "created_by": "scripts/image.sh"}],
    }, sort_keys=True, separators=(",", ":")).encode()
    manifest = json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": digest(config), "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                    "digest": digest(gz), "size": len(gz)}],
        "annotations": labels,
    }, sort_keys=True, separators=(",", ":")).encode()
    index = json.dumps({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": digest(manifest), "size": len(manifest),
            "platform": {"architecture": "amd64", "os": "linux"},
            # The tag for skopeo and umoci (oci:DIR:TAG); the full name for
            # containerd's import (kind load image-archive, ctr import).
            "annotations": {"org.opencontainers.image.ref.name": version,
                            "io.containerd.image.name": f"{name}:{version}"},
        }],
    }, sort_keys=True, separators=(",", ":")).encode()
    blobs = {digest(b)[7:]: b for b in (gz, config, manifest)}
    shutil.rmtree(layout, ignore_errors=True)
    os.makedirs(os.path.join(layout, "blobs", "sha256"))
    entries = [("blobs", 0o755, None), ("blobs/sha256", 0o755, None)]
    for hexd, data in sorted(blobs.items()):
        with open(os.path.join(layout, "blobs", "sha256", hexd), "wb") as f:
            f.write(data)
        entries.append((f"blobs/sha256/{hexd}", 0o644, data))
    layout_file = b'{"imageLayoutVersion":"1.0.0"}'
    for fname, data in (("index.json", index), ("oci-layout", layout_file)):
        with open(os.path.join(layout, fname), "wb") as f:
            f.write(data)
        entries.append((fname, 0o644, data))
    with open(archive, "wb") as f:
        f.write(tar_bytes(entries, epoch))
    print(f"image: {name}:{version} manifest {digest(manifest)}, "
          f"layer {len(gz)} bytes compressed ({len(tar)} uncompressed)")


if __name__ == "__main__":
    main(*sys.argv[1:5])
