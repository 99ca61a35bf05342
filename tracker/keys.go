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

// jobRange is a condition on col, a request id (requests.id, the first
// ordinal of a request page, a ledger row's request): in the range of the
// job whose id is bound to both placeholders (none when there is no such
// job: a job deleted between two statements shows as empty, not as an
// error). The literals are ordinalBits and maxOrdinal; queries by job spell
// the key as id >> 40 as the indexes of migration 0003 do.
func jobRange(col string) string {
	return col + ` BETWEEN (SELECT key << 40 FROM jobs WHERE jobs.id = ?)
	AND (SELECT key << 40 | 1099511627775 FROM jobs WHERE jobs.id = ?)`
}

// jobRows is jobRange over the requests table.
var jobRows = jobRange("requests.id")
