build kubeconform github.com/yannh/kubeconform/cmd/kubeconform \
  -ldflags "-s -w -X 'main.version=$(modver kubeconform github.com/yannh/kubeconform)'"
