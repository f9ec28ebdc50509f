package registry

import (
	"context"
	"errors"
	"slices"

	"github.com/cairn-registry/cairn/internal/layout"

	"github.com/cairn-registry/cairn/internal/storage/driver"
)

// Repositories returns up to n repository names after last in lexical order
// (n < 0: all), and whether more follow. A repository is a directory under
// layout.RepositoriesDir holding manifests, layer links or uploads.
func (r *Registry) Repositories(ctx context.Context, n int, last string) ([]string, bool, error) {
	var names []string
	err := r.d.Walk(ctx, layout.RepositoriesDir, func(fi driver.FileInfo) error {
		if !fi.IsDir {
			return nil
		}
		repo, sub, ok := layout.SplitRepoDir(fi.Path)
		if !ok {
			return nil // a component of a repository name: go on down
		}
		switch sub {
		case layout.ManifestsSubdir, layout.LayersSubdir, layout.UploadsSubdir:
			if repo != "" && (len(names) == 0 || names[len(names)-1] != repo) {
				names = append(names, repo)
			}
		}
		return driver.ErrSkipDir
	})
	if err != nil && !errors.Is(err, driver.ErrNotFound) {
		return nil, false, err
	}
	slices.Sort(names)
	names = slices.Compact(names)
	page, more := Page(names, n, last)
	return page, more, nil
}

// Page returns up to n entries of sorted after last (n < 0: all) and
// whether more follow.
func Page(sorted []string, n int, last string) ([]string, bool) {
	start := 0
	if last != "" {
		start, _ = slices.BinarySearch(sorted, last)
		if start < len(sorted) && sorted[start] == last {
			start++
		}
	}
	rest := sorted[start:]
	if n == 0 {
		return []string{}, false
	}
	if n < 0 || n >= len(rest) {
		return rest, false
	}
	return rest[:n], true
}
