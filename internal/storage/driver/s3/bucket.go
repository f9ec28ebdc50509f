package s3

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// Bucket administration for tests and benchmarks, which make a fresh bucket
// per run. The registry itself never creates or removes buckets.

// CreateBucket creates the bucket name.
func CreateBucket(ctx context.Context, client *s3.Client, name string) error {
	in := &s3.CreateBucketInput{Bucket: &name}
	// us-east-1 is the one region that must not be named as a constraint.
	if r := client.Options().Region; r != "" && r != "us-east-1" {
		in.CreateBucketConfiguration = &types.CreateBucketConfiguration{LocationConstraint: types.BucketLocationConstraint(r)}
	}
	if _, err := client.CreateBucket(ctx, in); err != nil {
		return fmt.Errorf("s3: creating bucket %s: %w", name, err)
	}
	return nil
}

// RemoveBucket aborts the bucket's multipart uploads, deletes its objects
// and then the bucket.
func RemoveBucket(ctx context.Context, client *s3.Client, name string) error {
	uploads := &s3.ListMultipartUploadsInput{Bucket: &name}
	for {
		out, err := client.ListMultipartUploads(ctx, uploads)
		if err != nil {
			return fmt.Errorf("s3: listing uploads of %s: %w", name, err)
		}
		for _, u := range out.Uploads {
			if _, err := client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{
				Bucket: &name, Key: u.Key, UploadId: u.UploadId,
			}); err != nil {
				return fmt.Errorf("s3: aborting an upload of %s: %w", name, err)
			}
		}
		if !aws.ToBool(out.IsTruncated) {
			break
		}
		uploads.KeyMarker, uploads.UploadIdMarker = out.NextKeyMarker, out.NextUploadIdMarker
	}
	for pages := s3.NewListObjectsV2Paginator(client, &s3.ListObjectsV2Input{Bucket: &name}); pages.HasMorePages(); {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("s3: listing %s: %w", name, err)
		}
		if len(page.Contents) == 0 {
			continue
		}
		ids := make([]types.ObjectIdentifier, len(page.Contents))
		for i, o := range page.Contents {
			ids[i] = types.ObjectIdentifier{Key: o.Key}
		}
		out, err := client.DeleteObjects(ctx, &s3.DeleteObjectsInput{
			Bucket: &name, Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)},
		}, withContentMD5)
		if err != nil {
			return fmt.Errorf("s3: emptying %s: %w", name, err)
		}
		if len(out.Errors) > 0 {
			e := out.Errors[0]
			return fmt.Errorf("s3: emptying %s: %d keys not deleted, first %s: %s", name, len(out.Errors), aws.ToString(e.Key), aws.ToString(e.Code))
		}
	}
	if _, err := client.DeleteBucket(ctx, &s3.DeleteBucketInput{Bucket: &name}); err != nil {
		return fmt.Errorf("s3: deleting bucket %s: %w", name, err)
	}
	return nil
}
