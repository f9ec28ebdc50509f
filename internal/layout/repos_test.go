package layout

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/opencontainers/go-digest"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// listing is a Lister that returns its entries in order, as a flat
// listing does; a path ending in "/" is a directory.
type listing []string

func (l listing) Walk(ctx context.Context, root string, fn driver.WalkFn) error {
	if len(l) == 0 {
		return driver.PathNotFoundError{Path: root, Driver: "test"}
	}
	skip := ""
	for _, p := range l {
		if skip != "" && strings.HasPrefix(p, skip) {
			continue
		}
		dir := strings.HasSuffix(p, "/")
		fi := driver.FileInfo{Path: strings.TrimSuffix(p, "/"), IsDir: dir}
		switch err := fn(fi); {
		case dir && errors.Is(err, driver.ErrSkipDir):
			skip = p
		case err != nil:
			return err
		}
	}
	return nil
}

type walked struct {
	repo  string
	kinds []EntryKind
}

func walkAll(t *testing.T, l listing, skipDir func(EntryKind) bool) ([]*walked, error) {
	t.Helper()
	var got []*walked
	w := RepoWalk[*walked]{
		SkipDir: skipDir,
		Open:    func(repo string) *walked { return &walked{repo: repo} },
		Add: func(s *walked, e RepoEntry, fi driver.FileInfo) error {
			if e.Repo != s.repo {
				t.Errorf("%s added to the state of %s", fi.Path, s.repo)
			}
			s.kinds = append(s.kinds, e.Kind)
			return nil
		},
	}
	err := WalkRepos(context.Background(), l, w, func(s *walked) error {
		got = append(got, s)
		return nil
	})
	return got, err
}

func TestWalkReposGroupsByRepository(t *testing.T) {
	d := digest.FromString("x")
	l := listing{
		LayerLink("a", d),
		RevisionLink("a", d),
		UploadsDir("a") + "/",
		UploadStartedAt("a", "u1"),
		LayerLink("a/b", d),
		Root + "/repositories/a/b/_referrers/",
		ReferrerLink("a/b", d, d),
		TagCurrentLink("a/b", "v1"),
		TagCurrentLink("c", "v1"),
	}
	skip := func(k EntryKind) bool { return k == EntryUploads }
	got, err := walkAll(t, l, skip)
	if err != nil {
		t.Fatal(err)
	}
	want := []walked{
		{"a", []EntryKind{EntryLayerLink, EntryRevisionLink}},
		{"a/b", []EntryKind{EntryLayerLink, EntryReferrerLink, EntryTagCurrent}},
		{"c", []EntryKind{EntryTagCurrent}},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d repositories, want %d", len(got), len(want))
	}
	for i, w := range want {
		if got[i].repo != w.repo || !slices.Equal(got[i].kinds, w.kinds) {
			t.Errorf("repository %d: %s %v, want %s %v", i, got[i].repo, got[i].kinds, w.repo, w.kinds)
		}
	}
}

func TestWalkReposOutOfOrder(t *testing.T) {
	d := digest.FromString("x")
	l := listing{LayerLink("a", d), LayerLink("b", d), RevisionLink("a", d)}
	if _, err := walkAll(t, l, func(EntryKind) bool { return false }); err == nil || !strings.Contains(err.Error(), "out of order") {
		t.Fatalf("a repository listed twice: err %v, want out of order", err)
	}
}

func TestWalkReposEmptyAndStop(t *testing.T) {
	got, err := walkAll(t, nil, func(EntryKind) bool { return false })
	if err != nil || len(got) != 0 {
		t.Fatalf("no repositories directory: %d repositories, err %v", len(got), err)
	}
	d := digest.FromString("x")
	var l listing
	for _, r := range []string{"a", "b", "c", "d"} {
		l = append(l, LayerLink(r, d))
	}
	stop := errors.New("stop")
	var seen []string
	w := RepoWalk[string]{
		SkipDir: func(EntryKind) bool { return false },
		Open:    func(repo string) string { return repo },
		Add:     func(string, RepoEntry, driver.FileInfo) error { return nil },
	}
	err = WalkRepos(context.Background(), l, w, func(repo string) error {
		seen = append(seen, repo)
		if repo == "b" {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || !slices.Equal(seen, []string{"a", "b"}) {
		t.Fatalf("each failing at b: saw %v, err %v", seen, err)
	}
}
