# versitygw: an S3 gateway over a local directory (the posix backend), started on
# loopback by tests/s3.py for the checkpoint.uri tests.
build versitygw github.com/versity/versitygw/cmd/versitygw -ldflags "-s -w"
