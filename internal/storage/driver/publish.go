package driver

import "context"

// Publish ends a write made at a temporary path: unless err (the write's
// own failure) is set, it commits fw and moves tmp over dst, so readers of
// dst see the old file or the whole new one. On any failure the temporary
// file is cancelled or deleted, and the first error is returned.
func Publish(ctx context.Context, d Driver, fw FileWriter, tmp, dst string, err error) error {
	if err == nil {
		err = fw.Commit(ctx)
	}
	if err != nil {
		fw.Cancel(ctx) // closes it too
		return err
	}
	if err := fw.Close(); err != nil {
		return err
	}
	if err := d.Move(ctx, tmp, dst); err != nil {
		d.DeleteFiles(ctx, []string{tmp})
		return err
	}
	return nil
}
