package layout

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// Lister is the part of a driver WalkRepos reads through.
type Lister interface {
	Walk(ctx context.Context, path string, fn driver.WalkFn) error
}

// RepoWalk says what WalkRepos keeps of each repository: S is the caller's
// state of one repository.
type RepoWalk[S any] struct {
	// SkipDir reports whether a directory of this kind is not descended
	// into (EntryUploads, EntryReferrers).
	SkipDir func(EntryKind) bool
	// Open returns a new state for repository repo, which the listing has
	// just reached; repo is a copy the state may keep.
	Open func(repo string) S
	// Add records one listed file of the repository whose state s is.
	Add func(s S, e RepoEntry, fi driver.FileInfo) error
}

// WalkRepos lists RepositoriesDir once and calls each with every
// repository's state as soon as the listing has passed the repository,
// while the listing goes on in another goroutine (where Open and Add run):
// reading one repository overlaps listing the next. A flat listing keeps a
// repository's entries together, since no component of a repository name
// starts with '_' (see ParseRepoPath); a repository met twice means the
// listing was out of order, which is an error, as grouping would be wrong.
// A missing RepositoriesDir holds no repository. The first error of the
// listing, Add or each ends the walk and is returned.
func WalkRepos[S any](ctx context.Context, d Lister, w RepoWalk[S], each func(S) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := make(chan S, 1)
	errc := make(chan error, 1)
	go func() {
		defer close(ch)
		errc <- w.list(ctx, d, ch)
	}()
	for s := range ch {
		if err := each(s); err != nil {
			cancel()
			for range ch {
			}
			<-errc
			return err
		}
	}
	return <-errc
}

// list walks RepositoriesDir and sends each repository's state to out once
// the listing is past it.
func (w RepoWalk[S]) list(ctx context.Context, d Lister, out chan<- S) error {
	var cur S
	curRepo := ""
	seen := make(map[string]struct{})
	flush := func() error {
		if curRepo == "" {
			return nil
		}
		select {
		case out <- cur:
		case <-ctx.Done():
			return ctx.Err()
		}
		var none S
		cur, curRepo = none, ""
		return nil
	}
	err := d.Walk(ctx, RepositoriesDir, func(fi driver.FileInfo) error {
		e := ParseRepoPath(fi.Path)
		if fi.IsDir {
			if w.SkipDir(e.Kind) {
				return driver.ErrSkipDir
			}
			return nil
		}
		if e.Repo == "" {
			return nil
		}
		if e.Repo != curRepo {
			if err := flush(); err != nil {
				return err
			}
			if _, dup := seen[e.Repo]; dup {
				return fmt.Errorf("the listing returned repository %s twice (out of order)", e.Repo)
			}
			curRepo = strings.Clone(e.Repo)
			seen[curRepo] = struct{}{}
			cur = w.Open(curRepo)
		}
		return w.Add(cur, e, fi)
	})
	if errors.Is(err, driver.ErrNotFound) {
		err = nil
	}
	if err != nil {
		return err
	}
	return flush()
}
