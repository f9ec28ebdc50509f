// Package clients holds round-trip tests that drive real registry clients
// (crane, regctl, oras, skopeo, podman) against a running cairn server and
// prove that what they push comes back byte for byte.
//
// A missing client tool skips its test, unless CAIRN_REQUIRE_CLIENTS=1 (set by
// scripts/test.sh in CI), which makes it a failure.
package clients
