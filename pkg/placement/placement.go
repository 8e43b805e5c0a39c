// Package placement decides which card each card of a quota.Request goes
// to, and in which isolation mode, from the node's cards and the vGPUs
// already on them. Place is a pure function: the caller holds the state
// (and the lock around it) and registers the result with the kernel
// module.
//
// The rules are the kernel module's (kmod/README.md, kmod/core/README.md),
// checked here first so that a container that cannot fit fails with one
// message naming its annotation, rather than with an errno:
//
//   - Mode: policy 0 (native) runs memory-only vGPUs, and cannot honour a
//     compute quota; policy 5 (hybrid) runs compute vGPUs only, those of
//     quota 0 sharing what the others leave; under the other policies a
//     quota of 0 asks for memory isolation only, above 0 for compute.
//   - One isolation mode per card: the mode of the vGPUs already there.
//   - At most max_inst vGPUs on a card, and the memory of its vGPUs at
//     most the card's.
//   - Under policies 1, 4, 5 and 6 the quotas of compute vGPUs sum to 100 %
//     at most and their units (Units) to max_inst at most. Policies 2 and 3
//     ignore quotas.
//   - No high priority under policy 5.
//   - A pinned card (gpuslice.io/gpu-index) or none.
//
// Among the cards that fit, Binpack takes the one left with the least free
// memory and Spread the one left with the most (ties: the lowest index).
// The cards of a multi-card request are placed in order (the pinned ones
// first), each on a card of its own.
package placement

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gpuslice/gpuslice/pkg/quota"
)

// Strategy chooses among the cards a vGPU fits on.
type Strategy string

// The strategies.
const (
	// Binpack fills cards one after the other: the card left with the
	// least free memory. The default.
	Binpack Strategy = "binpack"
	// Spread balances: the card left with the most free memory.
	Spread Strategy = "spread"
)

// ParseStrategy reads a strategy from configuration; "" is Binpack.
func ParseStrategy(s string) (Strategy, error) {
	switch Strategy(s) {
	case "", Binpack:
		return Binpack, nil
	case Spread:
		return Spread, nil
	}
	return "", fmt.Errorf("placement strategy %q: want %s or %s", s, Binpack, Spread)
}

// Mode is a vGPU's isolation mode, and a card's: that of its vGPUs.
type Mode int

// The modes, as /proc/gpuslice names them.
const (
	None    Mode = iota // a card without vGPUs
	Memory              // a memory cap; compute shared, never gated
	Compute             // a memory cap and a compute quota under the card's policy
)

func (m Mode) String() string {
	switch m {
	case None:
		return "none"
	case Memory:
		return "memory"
	case Compute:
		return "compute"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// The scheduling policies (reference.md, section 3).
const (
	PolicyNative     = 0
	PolicyFixed      = 1
	PolicyAverage    = 2
	PolicyPreemptive = 3
	PolicyWeighted   = 4
	PolicyHybrid     = 5
	PolicyWeak       = 6
)

// MaxInst is the highest max_inst of a card; 20 is the usual.
const MaxInst = 64

var policyNames = []string{"native", "fixed", "average", "preemptive", "weighted preemptive", "hybrid", "weighted weak"}

// PolicyName is the name of a policy: "native", "fixed", ...
func PolicyName(p int) string {
	if p < 0 || p >= len(policyNames) {
		return fmt.Sprintf("policy(%d)", p)
	}
	return policyNames[p]
}

// Card is a card of the node as configured: its policy and max_inst.
type Card struct {
	Index       int    // GPU_IDX, 0-based
	MemoryBytes uint64 // what its vGPUs may share
	Policy      int    // 0-6
	MaxInst     int    // vGPUs at most, and compute units per period; 1-64
}

// VGPU is a vGPU already on a card.
type VGPU struct {
	Owner       string // the container's id
	Card        int    // Card.Index
	MemoryBytes uint64
	Cores       uint32 // percent; 0 for memory vGPUs and quota-0 hybrid ones
	Priority    quota.Priority
	Mode        Mode
}

// Placement is where one quota.CardRequest goes: the vGPU to create.
type Placement struct {
	Card        int  // Card.Index
	Mode        Mode // Memory or Compute
	MemoryBytes uint64
	Cores       uint32
}

// String writes a placement for logs: "card 1 compute 4Gi 30%".
func (p Placement) String() string {
	return fmt.Sprintf("card %d %s %s %d%%", p.Card, p.Mode, quota.FormatMemory(p.MemoryBytes), p.Cores)
}

// Quotas reports whether a policy gives compute vGPUs units by quota (1,
// 4, 5 and 6), so that quotas may not sum over 100 % nor units over
// max_inst.
func Quotas(policy int) bool {
	switch policy {
	case PolicyFixed, PolicyWeighted, PolicyHybrid, PolicyWeak:
		return true
	}
	return false
}

// Units is how many of a card's max_inst compute units a vGPU of quota
// cores owns under the policies of Quotas: cores*maxInst/100 rounded down,
// at least one; none for quota 0 (a hybrid vGPU sharing the leftover).
func Units(cores uint32, maxInst int) int {
	if cores == 0 {
		return 0
	}
	return max(1, int(cores)*maxInst/100)
}

// ModeOn is the mode a vGPU of quota cores takes on a card of policy
// policy; false when the card cannot honour it (a quota under policy 0).
func ModeOn(policy int, cores uint32) (Mode, bool) {
	switch {
	case policy == PolicyNative:
		return Memory, cores == 0
	case policy == PolicyHybrid || cores > 0:
		return Compute, true
	}
	return Memory, true
}

// Usage is what the vGPUs on a card take of it.
type Usage struct {
	Card        Card
	Mode        Mode   // of its vGPUs; None while it has none
	VGPUs       int    // how many
	MemoryBytes uint64 // their memory
	Cores       uint32 // their quotas, when the policy counts them (Quotas)
	Units       int    // their units, when the policy counts them
}

// FreeBytes is the memory no vGPU holds.
func (u Usage) FreeBytes() uint64 {
	if u.MemoryBytes >= u.Card.MemoryBytes {
		return 0
	}
	return u.Card.MemoryBytes - u.MemoryBytes
}

// FreeCores is the compute quota left under a policy that counts quotas;
// 0 under the others.
func (u Usage) FreeCores() uint32 {
	if !Quotas(u.Card.Policy) || u.Cores >= 100 {
		return 0
	}
	return 100 - u.Cores
}

func (u *Usage) add(v VGPU) {
	if u.Mode == None {
		u.Mode = v.Mode
	}
	u.VGPUs++
	u.MemoryBytes += v.MemoryBytes
	if v.Mode == Compute && Quotas(u.Card.Policy) {
		u.Cores += v.Cores
		u.Units += Units(v.Cores, u.Card.MaxInst)
	}
}

// Usages tells, by card index, what the placed vGPUs take of each card
// (for logs and metrics). vGPUs on cards not listed are left out.
func Usages(cards []Card, placed []VGPU) map[int]Usage {
	us := usages(cards, placed)
	m := make(map[int]Usage, len(us))
	for _, u := range us {
		m[u.Card.Index] = u
	}
	return m
}

// usages is Usages in the order of cards.
func usages(cards []Card, placed []VGPU) []Usage {
	us := make([]Usage, len(cards))
	pos := make(map[int]int, len(cards))
	for i, c := range cards {
		us[i].Card = c
		pos[c.Index] = i
	}
	for _, v := range placed {
		if i, ok := pos[v.Card]; ok {
			us[i].add(v)
		}
	}
	return us
}

// Place chooses a card for each card of req, given the node's cards, the
// vGPUs already placed and a strategy ("" is Binpack). It returns one
// Placement per req.Cards, in order, on distinct cards, or an *Error whose
// message names the annotation, its value and the limit it runs into.
func Place(cards []Card, placed []VGPU, req *quota.Request, s Strategy) ([]Placement, error) {
	if s == "" {
		s = Binpack
	}
	if err := check(cards, req, s); err != nil {
		return nil, err
	}
	us := usages(cards, placed)
	taken := make([]bool, len(cards))
	out := make([]Placement, len(req.Cards))
	order := make([]int, 0, len(req.Cards))
	for _, pinned := range []bool{true, false} {
		for i, c := range req.Cards {
			if (c.Index >= 0) == pinned {
				order = append(order, i)
			}
		}
	}
	base := slices.Clone(us)
	for _, i := range order {
		at, err := pick(us, taken, req, i, s)
		if err != nil {
			// Greedy order can strand a later card of the request where
			// another assignment fits them all: search, and keep the
			// greedy refusal (it names the card that did not fit).
			if len(order) > 1 {
				if found := search(base, req, order, s); found != nil {
					return found, nil
				}
			}
			return nil, err
		}
		out[i] = assign(us, taken, at, req, i)
	}
	return out, nil
}

// assign records req.Cards[i] on the card at position at of us.
func assign(us []Usage, taken []bool, at int, req *quota.Request, i int) Placement {
	c := req.Cards[i]
	mode, _ := ModeOn(us[at].Card.Policy, c.Cores)
	taken[at] = true
	us[at].add(VGPU{Card: us[at].Card.Index, MemoryBytes: c.MemoryBytes, Cores: c.Cores, Priority: req.Priority, Mode: mode})
	return Placement{Card: us[at].Card.Index, Mode: mode, MemoryBytes: c.MemoryBytes, Cores: c.Cores}
}

// searchBudget bounds the backtracking (16 cards of a request over 32
// cards could otherwise take long); past it the greedy refusal stands.
const searchBudget = 20000

// search places every card of req by depth-first search over the
// feasible cards of each, tried in the strategy's order; nil when none
// fits within the budget.
func search(base []Usage, req *quota.Request, order []int, s Strategy) []Placement {
	us := slices.Clone(base)
	taken := make([]bool, len(us))
	out := make([]Placement, len(req.Cards))
	budget := searchBudget
	var try func(k int) bool
	try = func(k int) bool {
		if k == len(order) {
			return true
		}
		i := order[k]
		for _, at := range candidates(us, taken, req, i, s) {
			if budget--; budget < 0 {
				return false
			}
			saved := us[at]
			out[i] = assign(us, taken, at, req, i)
			if try(k + 1) {
				return true
			}
			us[at], taken[at] = saved, false
		}
		return false
	}
	if try(0) {
		return out
	}
	return nil
}

// candidates are the positions in us that can take req.Cards[item], best
// first for the strategy.
func candidates(us []Usage, taken []bool, req *quota.Request, item int, s Strategy) []int {
	c := req.Cards[item]
	var out []int
	for i, u := range us {
		if !taken[i] && (c.Index < 0 || u.Card.Index == c.Index) && refuse(u, req.Priority, c) == 0 {
			out = append(out, i)
		}
	}
	slices.SortStableFunc(out, func(a, b int) int {
		fa, fb := us[a].FreeBytes(), us[b].FreeBytes()
		switch {
		case fa == fb:
			return us[a].Card.Index - us[b].Card.Index
		case (s == Binpack) == (fa < fb):
			return -1
		}
		return 1
	})
	return out
}

// pick returns the position in us of the card for req.Cards[item].
func pick(us []Usage, taken []bool, req *quota.Request, item int, s Strategy) (int, error) {
	c := req.Cards[item]
	if c.Index >= 0 && !slices.ContainsFunc(us, func(u Usage) bool { return u.Card.Index == c.Index }) {
		idx := make([]int, len(us))
		for i, u := range us {
			idx[i] = u.Card.Index
		}
		return 0, &Error{Reason: NoSuchCard, Key: quota.KeyIndex, Item: item, Card: c.Index,
			msg: fmt.Sprintf("%s: no card %d on this node (%s)", req.Subject(quota.KeyIndex, item), c.Index, cardsWord(idx))}
	}
	best := -1
	var bestFree uint64
	var refused []refusal
	for i, u := range us {
		if taken[i] || (c.Index >= 0 && u.Card.Index != c.Index) {
			continue
		}
		if r := refuse(u, req.Priority, c); r != 0 {
			refused = append(refused, refusal{u: u, reason: r, cores: c.Cores, memory: c.MemoryBytes})
			continue
		}
		free := u.FreeBytes() - c.MemoryBytes
		better := best < 0 || (s == Binpack && free < bestFree) || (s == Spread && free > bestFree) ||
			(free == bestFree && u.Card.Index < us[best].Card.Index)
		if better {
			best, bestFree = i, free
		}
	}
	if best < 0 {
		return 0, noFit(req, item, refused, c.Index >= 0)
	}
	return best, nil
}

// refuse says why c cannot go on the card of u, or 0.
func refuse(u Usage, p quota.Priority, c quota.CardRequest) Reason {
	card := u.Card
	mode, ok := ModeOn(card.Policy, c.Cores)
	switch {
	case !ok:
		return Native
	case u.Mode != None && u.Mode != mode:
		return ModeMismatch
	case p == quota.High && card.Policy == PolicyHybrid:
		return HighPriority
	case u.VGPUs >= card.MaxInst:
		return TooManyVGPUs
	case mode == Compute && Quotas(card.Policy) && c.Cores > 0 &&
		(u.Cores+c.Cores > 100 || u.Units+Units(c.Cores, card.MaxInst) > card.MaxInst):
		return NoCompute
	case c.MemoryBytes > u.FreeBytes():
		return NoMemory
	}
	return 0
}

// check refuses a malformed request, strategy or card list.
func check(cards []Card, req *quota.Request, s Strategy) error {
	invalid := func(key string, item int, format string, a ...any) error {
		return &Error{Reason: Invalid, Key: key, Item: item, Card: -1, msg: fmt.Sprintf(format, a...)}
	}
	if s != Binpack && s != Spread {
		return invalid("", -1, "placement strategy %q: want %s or %s", s, Binpack, Spread)
	}
	seen := map[int]bool{}
	for _, c := range cards {
		switch {
		case c.Index < 0:
			return invalid("", -1, "card index %d: want 0 or more (node configuration)", c.Index)
		case seen[c.Index]:
			return invalid("", -1, "card %d listed twice (node configuration)", c.Index)
		case c.Policy < PolicyNative || c.Policy > PolicyWeak:
			return invalid("", -1, "card %d: policy %d: want 0-6 (node configuration)", c.Index, c.Policy)
		case c.MaxInst < 1 || c.MaxInst > MaxInst:
			return invalid("", -1, "card %d: max_inst %d: want 1-%d (node configuration)", c.Index, c.MaxInst, MaxInst)
		}
		seen[c.Index] = true
	}
	if req == nil || len(req.Cards) == 0 {
		return invalid("", -1, "placement: the request asks for no card")
	}
	pins := map[int]bool{}
	for i, c := range req.Cards {
		switch {
		case c.MemoryBytes < quota.MinMemory || c.MemoryBytes%quota.MinMemory != 0:
			return invalid(quota.KeyMemory, i, "%s: want a whole number of MiB, at least 1Mi", req.Subject(quota.KeyMemory, i))
		case c.Cores > quota.MaxCores || c.Cores%quota.CoresStep != 0:
			return invalid(quota.KeyCores, i, "%s: want a percent 0-100 in steps of 5", req.Subject(quota.KeyCores, i))
		case c.Index < -1 || pins[c.Index]:
			return invalid(quota.KeyIndex, i, "%s: want a card index 0-%d, each card of the request on its own", req.Subject(quota.KeyIndex, i), quota.MaxIndex)
		case req.Priority == quota.High && c.Cores == 0:
			return invalid(quota.KeyPriority, i, "%s: %s", req.Subject(quota.KeyPriority, -1), quota.HighNeedsCores)
		}
		if c.Index >= 0 {
			pins[c.Index] = true
		}
	}
	switch {
	case len(cards) == 0:
		return &Error{Reason: NoCards, Key: quota.KeyMemory, Item: -1, Card: -1,
			msg: fmt.Sprintf("%s: this node has no card for gpuslice", req.Subject(quota.KeyMemory, -1))}
	case len(req.Cards) > len(cards):
		return &Error{Reason: NoCards, Key: quota.KeyMemory, Item: -1, Card: -1,
			msg: fmt.Sprintf("%s: asks for %d cards, this node has %d", req.Subject(quota.KeyMemory, -1), len(req.Cards), len(cards))}
	}
	return nil
}

// cardsWord writes "card 3" or "cards 0-2, 5" (sorted, ranges joined).
func cardsWord(idx []int) string {
	idx = slices.Sorted(slices.Values(idx))
	if len(idx) == 1 {
		return fmt.Sprintf("card %d", idx[0])
	}
	var parts []string
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && idx[j+1] == idx[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", idx[i], idx[j]))
		} else {
			parts = append(parts, fmt.Sprint(idx[i]))
		}
		i = j + 1
	}
	return "cards " + strings.Join(parts, ", ")
}
