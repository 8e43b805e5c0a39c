package placement

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpuslice/gpuslice/pkg/quota"
)

// Reason is why a request was not placed. The reasons about a card are
// ordered from the least to the most relevant: a card refused for memory
// is compatible in every other way, so it is the best candidate to
// explain.
type Reason int

// The reasons.
const (
	Invalid      Reason = iota + 1 // a malformed request, strategy or card list
	NoCards                        // the node has no card, or fewer than asked
	NoSuchCard                     // gpuslice.io/gpu-index names a card the node lacks
	Native                         // a compute quota on a policy 0 (native) card
	ModeMismatch                   // the card runs vGPUs of the other isolation mode
	HighPriority                   // high priority on a policy 5 (hybrid) card
	TooManyVGPUs                   // the card has max_inst vGPUs already
	NoCompute                      // the quota or its units would pass 100 % or max_inst
	NoMemory                       // not enough free memory
)

var reasonNames = map[Reason]string{
	Invalid: "invalid", NoCards: "no cards", NoSuchCard: "no such card", Native: "native policy",
	ModeMismatch: "isolation mode", HighPriority: "high priority", TooManyVGPUs: "too many vGPUs",
	NoCompute: "no compute", NoMemory: "no memory",
}

func (r Reason) String() string {
	if n, ok := reasonNames[r]; ok {
		return n
	}
	return fmt.Sprintf("Reason(%d)", int(r))
}

// Error is a request Place could not place. Its message, which the
// container's creation fails with, names the annotation, its value and the
// limit it runs into; when several cards were refused for different
// reasons it explains each, the most relevant first.
type Error struct {
	Reason  Reason    // the most relevant reason
	Key     string    // the annotation the reason is about (quota.KeyMemory, ...); "" for the node's configuration
	Item    int       // the quota.CardRequest that did not fit; -1 for the whole request
	Card    int       // the card the reason is about (the best candidate); -1 for none
	Refused []Refusal // every card considered for Item, by index, and why it was refused
	msg     string
}

func (e *Error) Error() string { return e.msg }

// Refusal is why one card was refused.
type Refusal struct {
	Card   int
	Reason Reason
}

// refusal is a card refused for a card request, with what is needed to
// explain it.
type refusal struct {
	u      Usage
	reason Reason
	cores  uint32
	memory uint64
}

// noFit explains why no card fits req.Cards[item]: one part per reason,
// the most relevant first, each after its annotation.
func noFit(req *quota.Request, item int, refused []refusal, pinned bool) *Error {
	if len(refused) == 0 { // not reached: check leaves a card to consider
		return &Error{Reason: NoCards, Key: quota.KeyMemory, Item: item, Card: -1,
			msg: req.Subject(quota.KeyMemory, item) + ": no card left to consider"}
	}
	slices.SortStableFunc(refused, func(a, b refusal) int {
		if a.reason != b.reason {
			return int(b.reason) - int(a.reason)
		}
		return a.u.Card.Index - b.u.Card.Index
	})
	e := &Error{Reason: refused[0].reason, Item: item, Card: -1}
	e.Key = keyOf(e.Reason)
	var parts []string
	last := ""
	for i := 0; i < len(refused); {
		j := i
		for j < len(refused) && refused[j].reason == refused[i].reason {
			j++
		}
		text, best := explain(refused[i:j], j-i == len(refused) && !pinned)
		if i == 0 {
			e.Card = best
		}
		// Each part starts with its annotation, unless the previous
		// part's is the same.
		if subject := req.Subject(keyOf(refused[i].reason), item); subject != last {
			text, last = subject+": "+text, subject
		}
		parts = append(parts, text)
		i = j
	}
	e.msg = strings.Join(parts, "; ")
	for _, r := range refused {
		e.Refused = append(e.Refused, Refusal{Card: r.u.Card.Index, Reason: r.reason})
	}
	slices.SortFunc(e.Refused, func(a, b Refusal) int { return a.Card - b.Card })
	return e
}

// keyOf is the annotation a reason is about.
func keyOf(r Reason) string {
	switch r {
	case Native, ModeMismatch, NoCompute:
		return quota.KeyCores
	case HighPriority:
		return quota.KeyPriority
	case NoSuchCard:
		return quota.KeyIndex
	}
	return quota.KeyMemory
}

// explain writes why the cards of rs (one reason, by index) were refused,
// and which of them is the best candidate. With all, rs are all the cards
// considered.
func explain(rs []refusal, all bool) (string, int) {
	switch rs[0].reason {
	case Native:
		return phrase(rs, "runs", "run", func(refusal) string {
			return "policy 0 (native): no compute isolation"
		}), rs[0].u.Card.Index
	case ModeMismatch:
		return phrase(rs, "runs", "run", func(r refusal) string {
			if r.u.Mode == Memory {
				return "memory-only vGPUs (one isolation mode per card)"
			}
			return "compute-isolated vGPUs (one isolation mode per card)"
		}), rs[0].u.Card.Index
	case HighPriority:
		return phrase(rs, "runs", "run", func(refusal) string {
			return "policy 5 (hybrid), which has no high priority"
		}), rs[0].u.Card.Index
	case TooManyVGPUs:
		return phrase(rs, "has", "have", func(r refusal) string {
			return fmt.Sprintf("%d vGPUs already (max_inst %d)", r.u.VGPUs, r.u.Card.MaxInst)
		}), rs[0].u.Card.Index
	case NoCompute:
		best := slices.MaxFunc(rs, func(a, b refusal) int {
			if a.u.FreeCores() != b.u.FreeCores() {
				return int(a.u.FreeCores()) - int(b.u.FreeCores())
			}
			if la, lb := a.u.Card.MaxInst-a.u.Units, b.u.Card.MaxInst-b.u.Units; la != lb {
				return la - lb
			}
			return b.u.Card.Index - a.u.Card.Index
		})
		return summary(rs, best, all, "that much compute left", "compute left", "most left", computeLeft), best.u.Card.Index
	default: // NoMemory
		best := slices.MaxFunc(rs, func(a, b refusal) int {
			if fa, fb := a.u.FreeBytes(), b.u.FreeBytes(); fa != fb {
				if fa > fb {
					return 1
				}
				return -1
			}
			return b.u.Card.Index - a.u.Card.Index
		})
		return summary(rs, best, all, "that much free", "free memory", "largest free", memoryLeft), best.u.Card.Index
	}
}

// phrase writes "card 0 runs X, cards 1-2 run Y": the cards grouped by
// what what says of them.
func phrase(rs []refusal, one, many string, what func(refusal) string) string {
	var order []string
	byWhat := map[string][]int{}
	for _, r := range rs {
		w := what(r)
		if _, ok := byWhat[w]; !ok {
			order = append(order, w)
		}
		byWhat[w] = append(byWhat[w], r.u.Card.Index)
	}
	parts := make([]string, len(order))
	for i, w := range order {
		verb := one
		if len(byWhat[w]) > 1 {
			verb = many
		}
		parts[i] = cardsWord(byWhat[w]) + " " + verb + " " + w
	}
	return strings.Join(parts, ", ")
}

// summary writes what is left on the cards of rs: the card's own words
// for one card, else the best one's.
func summary(rs []refusal, best refusal, all bool, much, what, bestWord string, left func(refusal, bool) string) string {
	if len(rs) == 1 {
		return left(best, false)
	}
	idx := make([]int, len(rs))
	for i, r := range rs {
		idx[i] = r.u.Card.Index
	}
	head := "no card has " + much
	if !all {
		head = "not enough " + what + " on " + cardsWord(idx)
	}
	return fmt.Sprintf("%s (%s: %s)", head, bestWord, left(best, true))
}

// memoryLeft: "card 1 has 12288 MiB of 16384 MiB free", short "card 1,
// 12288 MiB of 16384 MiB".
func memoryLeft(r refusal, short bool) string {
	mibs := fmt.Sprintf("%d MiB of %d MiB", r.u.FreeBytes()>>20, r.u.Card.MemoryBytes>>20)
	if short {
		return fmt.Sprintf("card %d, %s", r.u.Card.Index, mibs)
	}
	return fmt.Sprintf("card %d has %s free", r.u.Card.Index, mibs)
}

// computeLeft: "card 0 has 50 % of its compute left", or when the units
// are what runs out, "card 0 has 2 of its 10 compute units left (a unit is
// 10 %; 30 % needs 3)"; short "card 0, 50 %".
func computeLeft(r refusal, short bool) string {
	u := r.u
	if u.Cores+r.cores > 100 {
		if short {
			return fmt.Sprintf("card %d, %d %%", u.Card.Index, u.FreeCores())
		}
		return fmt.Sprintf("card %d has %d %% of its compute left", u.Card.Index, u.FreeCores())
	}
	m := u.Card.MaxInst
	unit := strconv.FormatFloat(100/float64(m), 'f', -1, 64)
	why := fmt.Sprintf("a unit is %s %%; %d %% needs %d", unit, r.cores, Units(r.cores, m))
	if short {
		return fmt.Sprintf("card %d, %d of %d units; %s", u.Card.Index, m-u.Units, m, why)
	}
	return fmt.Sprintf("card %d has %d of its %d compute units left (%s)", u.Card.Index, m-u.Units, m, why)
}
