package notify

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/cairn-registry/cairn/internal/notify"
	"github.com/cairn-registry/cairn/internal/testutil/cairnproc"
	"github.com/cairn-registry/cairn/internal/testutil/regtest"
)

// retentionPolicy is the retention section of the tests of retention's
// events: it deletes ret/app:old, untagged, and keeps ret/app:keep.
const retentionPolicy = `retention:
  delay: 0s
  policies:
    - repositories: ["ret/**"]
      deleteuntagged: true
      keeptags:
        - patterns: ["keep"]
`

const cliGCConfig = `
storage:
  delete:
    enabled: true
` + retentionPolicy + `notifications:
  endpoints:
    - name: all
      url: %URL%/hook
      headers:
        X-Test: ["yes"]
`

// retentionDeletes reports whether evs hold retention's deletes of the
// tag "old" and of the manifest gone, and none of the tag "keep".
func retentionDeletes(t *testing.T, evs []notify.Event, gone string) bool {
	t.Helper()
	var tag, manifest bool
	for _, ev := range evs {
		if ev.Action != notify.ActionDelete || ev.Actor.Name != "retention" {
			continue
		}
		switch {
		case ev.Target.Tag == "keep":
			t.Fatalf("the kept tag was deleted: %+v", ev)
		case ev.Target.Tag == "old":
			tag = true
		case ev.Target.Digest.String() == gone:
			manifest = true
		}
	}
	return tag && manifest
}

// seedRetention pushes ret/app:keep and ret/app:old and returns the
// config's path, the server and the digest of the image retention deletes.
func seedRetention(t *testing.T, rc *receiver) (string, *cairnproc.Server, string) {
	t.Helper()
	cfg := cairnproc.WriteConfig(t, strings.ReplaceAll(cliGCConfig, "%URL%", rc.srv.URL))
	srv := cairnproc.Start(t, "", "--config", cfg)
	var gone string
	for _, tag := range []string{"keep", "old"} {
		img, err := random.Image(1024, 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(regtest.Ref(t, srv.Addr, "ret/app:"+tag), img, remote.WithContext(t.Context())); err != nil {
			t.Fatal(err)
		}
		d, _ := img.Digest()
		gone = d.String()
	}
	return cfg, srv, gone
}

func cliGC(t *testing.T, cfg, root string) {
	t.Helper()
	out, err := exec.Command(cairnproc.Binary(t), "gc", "--config", cfg, "--root", root, "--delay", "0s").CombinedOutput()
	if err != nil {
		t.Fatalf("cairn gc: %v\n%s", err, out)
	}
}

// TestCLIGCRetentionEvents: `cairn gc` with retention, serve stopped,
// announces retention's deletes and its run as the scheduled GC inside
// serve does. It queues and sends them itself before it exits, the
// receiver being up.
func TestCLIGCRetentionEvents(t *testing.T) {
	rc := newReceiver(t)
	cfg, srv, gone := seedRetention(t, rc)
	srv.Stop()
	cliGC(t, cfg, srv.Root)
	evs := rc.got(t)
	if !retentionDeletes(t, evs, gone) {
		t.Fatalf("after cairn gc: no delete events of retention for ret/app:old and its manifest; got:\n%s", dump(evs))
	}
	gcRun := false
	for _, ev := range evs {
		gcRun = gcRun || ev.Action == notify.ActionGC
	}
	if !gcRun {
		t.Errorf("no gc event of the CLI run; got:\n%s", dump(evs))
	}
}

// TestCLIGCRetentionEventsBesideServe: with serve running, it holds the
// queue file; `cairn gc` spools its events and serve queues and sends them.
func TestCLIGCRetentionEventsBesideServe(t *testing.T) {
	rc := newReceiver(t)
	cfg, srv, gone := seedRetention(t, rc)
	cliGC(t, cfg, srv.Root)
	rc.waitFor(t, srv, "retention's deletes, spooled by cairn gc", func(notify.Event) bool {
		return retentionDeletes(t, rc.got(t), gone)
	})
}
