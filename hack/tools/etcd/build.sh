# etcd: the version k8s.io/kubernetes pins (its go.mod requires etcd/server/v3).
build etcd go.etcd.io/etcd/server/v3 -ldflags "-s -w"
