// Package testenv reads the addresses of the servers tests need (Redis,
// MinIO, fake-gcs-server, Azurite), which scripts/test.sh starts and
// exports. It imports nothing of cairn, so any test may use it.
package testenv

import (
	"os"
	"testing"
)

// Need returns the variables' values, skipping the test when one is unset
// (failing it under CI, where the test script starts every server).
func Need(t testing.TB, vars ...string) []string {
	t.Helper()
	vals := make([]string, len(vars))
	for i, v := range vars {
		vals[i] = os.Getenv(v)
		if vals[i] == "" {
			msg := v + " is not set (scripts/test.sh starts the servers tests need)"
			if os.Getenv("CI") == "true" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	return vals
}

// RedisAddr is the test Redis server's address ($CAIRN_TEST_REDIS_ADDR).
func RedisAddr(t testing.TB) string {
	t.Helper()
	return Need(t, "CAIRN_TEST_REDIS_ADDR")[0]
}
