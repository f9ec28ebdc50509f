package inmemory_test

import (
	"testing"

	"github.com/cairn-registry/cairn/internal/storage/driver"
	"github.com/cairn-registry/cairn/internal/storage/driver/inmemory"
	"github.com/cairn-registry/cairn/internal/storage/driver/testsuite"
)

func TestSuite(t *testing.T) {
	testsuite.Run(t, func(*testing.T) driver.Driver { return inmemory.New() })
}
