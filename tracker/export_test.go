package tracker

// PGLockCheckEvery lets tests of package tracker_test slow the job lock's
// watcher (postgres_lockwatch.go) so that only the fence acts.
var PGLockCheckEvery = &pgLockCheckEvery
