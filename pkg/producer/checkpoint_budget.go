package producer

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
)

// The restore budget. RestoreState must not let a checkpoint make it
// allocate memory the checkpoint has not paid for in bytes: the body is
// streamed and its checksum is only known at the end. Table slots are the
// only allocation a checkpoint sizes (the lane's size comes from the
// configuration), so they are what the budget counts.
//
// A fixed allowance could not follow the state: tables grow with (member,
// block) edges, not with unique blocks, so W workers caching one shared
// prefix need W member tables of its size while --max-tracked-blocks counts
// the prefix once. Instead every table read pays for its own slots: the
// account starts at checkpointBaseSlots and each table, in encoding order
// (owners, then members in ascending order), is credited
// budgetSlotsPerEntry slots per entry it lists plus tableMinSlots, then
// charged its capacity; a charge beyond the account refuses the
// checkpoint. A table is allocated before its entries arrive only if the
// account already covers it; otherwise its entries are buffered as they
// arrive and it is allocated once they have paid for it. Beyond the base,
// memory is therefore bounded by the bytes received: at most 4 slots (64
// bytes) per entry of at least 8 bytes, plus the entries being buffered.
//
// Every table grown by inserts fits: it doubled to c slots when it held
// 3c/8 entries (5c/16 for member lineage tables, which grow at 5/8 load),
// and 16/5 < budgetSlotsPerEntry, so each such table leaves credit behind. What the base and that credit must cover is capacity
// kept after entries left: the owner table's preallocation (at most 8
// slots per bucket), tables emptied by removals (tables never shrink) and
// reused pooled tables. A state with more empty capacity than that is
// refused by the writer (Checkpoint, CheckpointFits) with the same rule,
// so a checkpoint this build writes always restores.
const budgetSlotsPerEntry = 4

// checkpointBaseSlots is the budget's starting allowance: 16 slots per
// lane bucket (twice the largest owner preallocation), at least 64Ki. It
// depends on the format alone, so writer and reader agree.
func checkpointBaseSlots(bucketCount uint64) uint64 {
	return max(1<<16, 16*bucketCount)
}

// slotBudget is the account of the restore budget (see above). left never
// underflows: a charge beyond it fails and leaves it unchanged.
type slotBudget struct{ left uint64 }

func newSlotBudget(bucketCount uint64) slotBudget {
	return slotBudget{left: checkpointBaseSlots(bucketCount)}
}

// credit adds what a table listing entries pays for (saturating: entries
// is bounded by bytes already read, so saturation means no limit is near).
func (b *slotBudget) credit(entries uint64) {
	hi, add := bits.Mul64(entries, budgetSlotsPerEntry)
	add, carry := bits.Add64(add, tableMinSlots, 0)
	left, carry2 := bits.Add64(b.left, add, 0)
	if hi|carry|carry2 != 0 {
		left = math.MaxUint64
	}
	b.left = left
}

// charge takes a table's slots from the account; false: over budget.
func (b *slotBudget) charge(slots uint64) bool {
	if slots > b.left {
		return false
	}
	b.left -= slots
	return true
}

// account credits and charges one table (the writer's view of what the
// reader will do with it).
func (b *slotBudget) account(t *u64Table) bool {
	b.credit(uint64(t.n))
	return b.charge(t.capacity())
}

// CheckpointFits reports whether a checkpoint of the state would restore:
// nil, or a *CheckpointError of kind ErrCheckpointOverBudget saying which
// table the restore budget cannot pay for. Checkpoint runs the same check
// before writing anything; a caller that must not start a write it cannot
// finish (an object store upload) calls it first. Read-only, O(members).
func (s *State) CheckpointFits() error {
	return s.checkpointFits(s.sortedMembers())
}

func (s *State) checkpointFits(members []Member) error {
	b := newSlotBudget(s.format.BucketCount)
	if !b.account(&s.owners) {
		return overBudget("owner table", &s.owners, b.left)
	}
	for _, m := range members {
		if t := &s.members[m].lineage; !b.account(t) {
			return overBudget(fmt.Sprintf("lineage of member %d/%d", m.WorkerID, m.DpRank), t, b.left)
		}
	}
	return nil
}

func overBudget(what string, t *u64Table, left uint64) error {
	return checkpointErr(ErrCheckpointOverBudget, "%s: %d slots for %d entries, the restore budget has %d left after crediting them",
		what, t.capacity(), t.n, left)
}

func (s *State) sortedMembers() []Member {
	members := make([]Member, 0, len(s.members))
	for m := range s.members {
		members = append(members, m)
	}
	slices.SortFunc(members, Member.Compare)
	return members
}
