package main

// Object storage (docs/scale-out.md, "Object storage"): s3:// and gs://
// input and output paths, and --store, where a job's chunk and results files live
// beside the local state directory. Here the stores are built from the
// environment (as the AWS SDKs read it) and checked before any work; the
// lifecycle package uses them (lifecycle/objects.go).

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/sluice-batch/sluice/objstore"
)

// pathArg is a command line file argument as sluice keeps it: an s3://
// URL as given (checked), a local path made absolute.
func pathArg(s string) (string, error) {
	if !strings.Contains(s, "://") {
		return filepath.Abs(s)
	}
	loc, err := objstore.Parse(s)
	if err != nil {
		return "", withCode(exitUsage, err)
	}
	if loc.Key == "" || strings.HasSuffix(loc.Key, "/") {
		return "", usageErr("%s: name an object (s3://BUCKET/KEY or gs://BUCKET/KEY), not a bucket or a prefix", s)
	}
	return loc.String(), nil
}

var s3Stores sync.Map // bucket+"/"+prefix -> *objstore.S3 (gs:// ones: "gs://"+bucket+"/"+prefix -> *objstore.GCS)

// gcsStore is s3Store for Cloud Storage: the GCS server at
// $STORAGE_EMULATOR_HOST when set, else Cloud Storage with Application
// Default Credentials, or $GOOGLE_OAUTH_ACCESS_TOKEN when set.
func gcsStore(ctx context.Context, bucket, prefix string) (*objstore.GCS, error) {
	return checkedStore(ctx, "gs://"+bucket+"/"+prefix, func() (*objstore.GCS, error) {
		o := gcsOptions()
		o.AccessToken = os.Getenv("GOOGLE_OAUTH_ACCESS_TOKEN")
		return objstore.NewGCS(ctx, bucket, prefix, o)
	})
}

// checkedStore is the store id names, made by open and checked on first
// use in this process, then kept in s3Stores: a client that cannot be
// made is bad usage; Check's error gets storeErr's exit code.
func checkedStore[S interface {
	objstore.Store
	Check(context.Context) error
}](ctx context.Context, id string, open func() (S, error)) (S, error) {
	var none S
	if s, ok := s3Stores.Load(id); ok {
		return s.(S), nil
	}
	s, err := open()
	if err != nil {
		return none, withCode(exitUsage, err)
	}
	if err := s.Check(ctx); err != nil {
		return none, storeErr(err)
	}
	s3Stores.Store(id, s)
	return s, nil
}

// gcsOptions is what the environment says of Cloud Storage's endpoint:
// STORAGE_EMULATOR_HOST, as Google's clients read it.
func gcsOptions() objstore.GCSOptions {
	return objstore.GCSOptions{Emulator: os.Getenv("STORAGE_EMULATOR_HOST")}
}

// storeAt is the store of a parsed s3:// or gs:// location, under its key.
func storeAt(ctx context.Context, loc objstore.Location) (objstore.Store, error) {
	if loc.GCS {
		return gcsStore(ctx, loc.Bucket, loc.Key)
	}
	return s3Store(ctx, loc.Bucket, loc.Key)
}

// s3Store is the S3 store of bucket (under prefix) as the environment
// configures it, checked once per process: a missing bucket, refused
// credentials or an endpoint that cannot be reached are told before any
// work, with the exit code README's table gives them.
func s3Store(ctx context.Context, bucket, prefix string) (*objstore.S3, error) {
	return checkedStore(ctx, bucket+"/"+prefix, func() (*objstore.S3, error) {
		return objstore.NewS3(ctx, bucket, prefix, objstore.S3Options{Endpoint: objstore.EndpointFromEnv(os.Getenv)})
	})
}

// storeErr gives a store's error its exit code: a bucket that does not
// exist is bad usage (2); refused credentials and an endpoint out of
// reach stop the run (1), as a bad provider key or the network down do.
func storeErr(err error) error {
	if errors.Is(err, objstore.ErrNoBucket) {
		return withCode(exitUsage, err)
	}
	return err
}

// objectOf is the store and key of an s3:// or gs:// URL.
func objectOf(ctx context.Context, url string) (objstore.Store, string, error) {
	loc, err := objstore.Parse(url)
	if err != nil {
		return nil, "", withCode(exitUsage, err)
	}
	key := loc.Key
	loc.Key = ""
	s, err := storeAt(ctx, loc)
	return s, key, err
}

// objects is lifecycle.Objects for the stores of s3:// and gs:// URLs.
func objects(ctx context.Context, url string) (objstore.Store, string, error) {
	return objectOf(ctx, url)
}

// checkInput checks, before anything else, that the input is there: a
// file, or an object in a bucket that takes our credentials.
func checkInput(ctx context.Context, input string) error {
	if !objstore.IsURL(input) {
		if _, err := os.Stat(input); err != nil {
			return withCode(exitUsage, fmt.Errorf("input: %w", err))
		}
		return nil
	}
	s, key, err := objectOf(ctx, input)
	if err != nil {
		return err
	}
	if _, err := s.Stat(ctx, key); errors.Is(err, objstore.ErrNotExist) {
		return usageErr("input %s: no such object", input)
	} else if err != nil {
		return storeErr(fmt.Errorf("input: %w", err))
	}
	return nil
}

// checkObjectOutput checks an output (or errors file) in object storage:
// never the input's object, and a bucket that is there and takes our
// credentials.
func checkObjectOutput(ctx context.Context, flag, out, input string) error {
	if out == input {
		return usageErr("%s %s is the input object: sluice never writes over its input; choose another output", flag, out)
	}
	_, _, err := objectOf(ctx, out)
	return err
}

// storeFlag is --store, else $SLUICE_STORE.
func (f *jobFlags) storeFlag() string {
	if f.store != "" {
		return f.store
	}
	return os.Getenv("SLUICE_STORE")
}

// jobStore opens --store: nil when it is the state directory (the default),
// whose job directories are the files themselves.
func jobStore(ctx context.Context, f *jobFlags, stateDir string) (objstore.Store, error) {
	s := f.storeFlag()
	if s == "" {
		return nil, nil
	}
	loc, err := objstore.Parse(s)
	if err != nil {
		return nil, withCode(exitUsage, fmt.Errorf("--store: %w", err))
	}
	if loc.S3 || loc.GCS {
		return storeAt(ctx, loc)
	}
	if filepath.Clean(loc.Path) == filepath.Clean(stateDir) {
		return nil, nil
	}
	d, err := objstore.NewDir(loc.Path)
	if err != nil {
		return nil, withCode(exitUsage, fmt.Errorf("--store: %w", err))
	}
	return d, nil
}
