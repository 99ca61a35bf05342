package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/sluice-batch/sluice/objstore"
	"github.com/sluice-batch/sluice/provider"
)

// checkCredentials refuses, before anything is planned, a provider whose
// key, account or base URL is not there to be found.
func checkCredentials(f *jobFlags, p provider.Preset) error {
	if p.Name == "local" {
		return nil
	}
	if credential(p) == "" && p.Family != provider.FamilyVertex { // vertex: else Application Default Credentials
		return missingKey(p)
	}
	if p.AccountEnv != "" && os.Getenv(p.AccountEnv) == "" {
		return usageErr("provider %s needs an account id in $%s", p.Name, p.AccountEnv)
	}
	if f.resolvedBaseURL(p) == "" { // identity.go: flag, else environment, else preset
		env := ""
		if p.BaseURLEnv != "" {
			env = " or $" + p.BaseURLEnv
		}
		return usageErr("provider %s has no default base URL: give yours with --base-url%s", p.Name, env)
	}
	return nil
}

// checkOutputPaths refuses, before anything is planned, an output or
// errors file that is the input (by any path: the same name, a relative
// one, a symbolic or a hard link), or that cannot be written: its
// directory missing, not a directory, or not writable.
func checkOutputPaths(input, out, errorsOut string) error {
	ctx := context.Background()
	if err := checkInput(ctx, input); err != nil { // a file, or an object (objects.go)
		return err
	}
	in, _ := os.Stat(input) // nil for an object
	for _, o := range []struct{ flag, path string }{{"--out", out}, {"--errors", errorsOut}} {
		if objstore.IsURL(o.path) {
			if err := checkObjectOutput(ctx, o.flag, o.path, input); err != nil {
				return err
			}
			continue
		}
		if st, err := os.Stat(o.path); err == nil {
			if in != nil && os.SameFile(in, st) {
				return usageErr("%s %s is the input file %s: sluice never writes over its input; choose another output", o.flag, o.path, input)
			}
			if st.IsDir() {
				return usageErr("%s %s is a directory; give a file name", o.flag, o.path)
			}
		}
		if err := checkWritableDir(filepath.Dir(o.path)); err != nil {
			return withCode(exitUsage, fmt.Errorf("%s %s: %w", o.flag, o.path, err))
		}
	}
	if filepath.Clean(out) == filepath.Clean(errorsOut) {
		return usageErr("--errors %s is the output file", errorsOut)
	}
	return nil
}

// checkWritableDir checks that dir is a directory sluice can create files
// in, by creating (and removing) one.
func checkWritableDir(dir string) error {
	st, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("directory %s does not exist", dir)
	}
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	f, err := os.CreateTemp(dir, ".sluice-check-*")
	if err != nil {
		return fmt.Errorf("directory %s is not writable: %w", dir, err)
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

// preflight checks what a run can check before it plans: the output paths
// and the provider's credentials (a missing key used to be found only
// after the whole input was planned, a missing output directory only after
// the whole job ran).
func preflight(f *runFlags, p provider.Preset, input, out string) error {
	errorsOut := f.errorsOut
	if errorsOut == "" {
		errorsOut = errorsPathFor(out)
	}
	errorsOut, err := pathArg(errorsOut)
	if err != nil {
		return err
	}
	if err := checkOutputPaths(input, out, errorsOut); err != nil {
		return err
	}
	if p.Family == provider.FamilyBedrock {
		return f.net.bedrock.check(&f.jobFlags)
	}
	return checkCredentials(&f.jobFlags, p)
}
