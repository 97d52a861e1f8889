# The real node's runtime: containerd 2 from its Go module (upstream's version ldflags;
# no btrfs/devmapper/zfs snapshotters, so no cgo).
CONTAINERD_VERSION=$(modver containerd github.com/containerd/containerd/v2)
for cmd in containerd containerd-shim-runc-v2 ctr; do
  build "$cmd" "github.com/containerd/containerd/v2/cmd/$cmd" -tags no_btrfs,no_devmapper,no_zfs -ldflags "-s -w \
    -X 'github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION' \
    -X 'github.com/containerd/containerd/v2/version.Package=github.com/containerd/containerd/v2'"
done
