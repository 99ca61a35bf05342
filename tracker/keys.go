package tracker

// A request row's id packs its job's key and its ordinal (migration
// 0003): (key << ordinalBits) | ordinal. Keys are small integers given to
// jobs in order; 2^23 jobs and 2^40 requests per job fit in SQLite's
// signed 64-bit rowid.
const (
	ordinalBits = 40
	maxOrdinal  = 1<<ordinalBits - 1
	maxJobKey   = 1<<(63-ordinalBits) - 1
)

func requestID(key, ordinal int64) int64 { return key<<ordinalBits | ordinal }

// A job's rows are the range of ids key << 40 to key << 40 | maxOrdinal:
// SQLite's statements (sql/sqlite.sql) bind the job's id twice, the
// literals there are ordinalBits and maxOrdinal, and queries by job spell
// the key as id >> 40 as the indexes of migration 0003 do.
