// Package quota reads what a container asks of gpuslice from its
// annotations: memory on each card, a compute quota on each card, a
// priority, and optional card pins. It checks the values and nothing else:
// which card a request goes to, and in which isolation mode, is
// pkg/placement's business.
//
// The keys (the pod's annotations, as Kubernetes users set them):
//
//	gpuslice.io/gpu-memory    memory per card: 4Gi, 4096Mi, 1.5Gi, 512Mi, 1Ti or
//	                          bytes; whole MiB, 1Mi-16Ti; "4Gi,8Gi" asks for two cards
//	gpuslice.io/gpu-cores     compute per card in percent, 0-100 in steps of 5
//	                          (default 0: memory isolation only); one value for
//	                          every card or one per card
//	gpuslice.io/gpu-priority  high or low (default low)
//	gpuslice.io/gpu-index     pins each card to an index 0-31 (one per card)
//
// Each key can be set for one container with NRI's convention: the pod
// annotation KEY/container.NAME. A container's own annotations may hold the
// plain KEY too. The first found wins, in this order: the pod's
// KEY/container.NAME, the container's KEY/container.NAME, the container's
// KEY, the pod's KEY.
//
// A container without gpuslice.io/gpu-memory asks for nothing (Parse returns
// nil, nil), but a gpuslice.io/gpu-* key meant for it without the memory is
// an error: the container asked for isolation and would run without it. A
// pod-wide (plain) gpuslice.io/gpu-cores, -priority or -index is taken as
// the default of the containers that have a memory annotation when the pod
// names one for some container (KEY/container.NAME), and is an error
// otherwise. An unknown gpuslice.io/gpu-* key meant for the container is an
// error (a misspelt key would silently drop the isolation).
//
// Parse does not know whether a container is an init container; the
// caller refuses a request from one (reference: init containers may not
// request vGPU resources), pod-wide keys included.
package quota

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// The annotation keys.
const (
	KeyMemory   = "gpuslice.io/gpu-memory"
	KeyCores    = "gpuslice.io/gpu-cores"
	KeyPriority = "gpuslice.io/gpu-priority"
	KeyIndex    = "gpuslice.io/gpu-index"

	// KeyPrefix starts every key of this package; any other key with
	// this prefix is refused as unknown.
	KeyPrefix = "gpuslice.io/gpu-"
	// ContainerSuffix followed by a container's name makes a key apply
	// to that container only: gpuslice.io/gpu-memory/container.app.
	ContainerSuffix = "/container."
)

// Keys lists the annotation keys, the memory first.
var Keys = []string{KeyMemory, KeyCores, KeyPriority, KeyIndex}

// Limits of a request.
const (
	MaxCards  = 16       // cards per container
	MaxIndex  = 31       // highest card index of gpuslice.io/gpu-index
	MinMemory = 1 << 20  // bytes (1 MiB)
	MaxMemory = 16 << 40 // bytes (16 TiB)
	CoresStep = 5        // compute quotas are multiples of this percent
	MaxCores  = 100      // percent
)

const (
	mib          = 1 << 20
	defaultCores = "0"
)

// Priority of a vGPU, as GPU_CONTAINER_PRIORITY and the kernel module
// number it.
type Priority int

// The priorities.
const (
	Low  Priority = 0
	High Priority = 1
)

func (p Priority) String() string {
	switch p {
	case Low:
		return "low"
	case High:
		return "high"
	}
	return fmt.Sprintf("Priority(%d)", int(p))
}

// CardRequest is what a container asks of one card.
type CardRequest struct {
	MemoryBytes uint64 // a whole number of MiB, MinMemory-MaxMemory
	Cores       uint32 // percent, 0-100 in steps of 5; 0: no compute quota
	Index       int    // the card it is pinned to; -1: any card
}

// MemoryMiB is the memory in MiB, the unit of GPU_CONTAINER_MEM.
func (c CardRequest) MemoryMiB() uint64 { return c.MemoryBytes / mib }

// Source is where a value came from: the annotation key as written (with
// its /container.NAME suffix when that was the one used) and its value as
// written.
type Source struct {
	Key   string
	Value string
}

func (s Source) String() string { return fmt.Sprintf("%s=%q", s.Key, s.Value) }

// Request is what a container asks for: one CardRequest per card, each on
// a different card, all with one priority.
type Request struct {
	Cards    []CardRequest
	Priority Priority
	// Sources holds, by key (KeyMemory, ...), the annotations the
	// request was parsed from; the keys that were not set are absent. A
	// Request built in code may leave it nil. Errors about the request
	// quote them (see Subject).
	Sources map[string]Source
}

// MemoryBytes is the memory of all the cards together.
func (r *Request) MemoryBytes() uint64 {
	var n uint64
	for _, c := range r.Cards {
		n += c.MemoryBytes
	}
	return n
}

// String describes the request for logs, in the annotations' terms:
// "memory=4Gi,8Gi cores=30,30 index=any,any priority=low".
func (r *Request) String() string {
	if r == nil {
		return "no request"
	}
	var b strings.Builder
	for i, f := range []string{KeyMemory, KeyCores, KeyIndex} {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strings.TrimPrefix(f, KeyPrefix))
		b.WriteByte('=')
		b.WriteString(r.format(f, false))
	}
	b.WriteString(" priority=")
	b.WriteString(r.Priority.String())
	return b.String()
}

// format writes the request's values of one key as an annotation would;
// with compact, a list of equal values is written once.
func (r *Request) format(key string, compact bool) string {
	if key == KeyPriority {
		return r.Priority.String()
	}
	v := make([]string, len(r.Cards))
	for i, c := range r.Cards {
		switch key {
		case KeyMemory:
			v[i] = FormatMemory(c.MemoryBytes)
		case KeyCores:
			v[i] = strconv.FormatUint(uint64(c.Cores), 10)
		case KeyIndex:
			v[i] = "any"
			if c.Index >= 0 {
				v[i] = strconv.Itoa(c.Index)
			}
		}
	}
	if compact && len(v) > 1 {
		same := true
		for _, s := range v[1:] {
			same = same && s == v[0]
		}
		if same {
			v = v[:1]
		}
	}
	return strings.Join(v, ",")
}

// Subject names the annotation behind one of the request's values, as an
// error message about it starts: `gpuslice.io/gpu-cores="30"`. With card
// >= 0 in a request of several cards it adds which card:
// `gpuslice.io/gpu-memory="4Gi,64Gi" (2nd of 2 cards: 64Gi)`. A key that
// was not set reads `gpuslice.io/gpu-cores (not set: 0)`; a Request without
// Sources is described from its values.
func (r *Request) Subject(key string, card int) string {
	s, ok := r.Sources[key]
	var out string
	switch {
	case ok:
		out = s.String()
	case r.Sources == nil:
		s = Source{Key: key, Value: r.format(key, true)}
		out = s.String()
	default:
		def := map[string]string{KeyCores: defaultCores, KeyPriority: Low.String(), KeyIndex: "any"}[key]
		out = fmt.Sprintf("%s (not set: %s)", key, def)
	}
	n := len(r.Cards)
	if card < 0 || card >= n || n < 2 {
		return out
	}
	which := fmt.Sprintf("%s of %d cards", Ordinal(card+1), n)
	if items := splitList(s.Value); len(items) == n {
		which += ": " + items[card]
	}
	return out + " (" + which + ")"
}

// Ordinal writes 1st, 2nd, 3rd, 4th, ... 11th, 12th, 13th, 21st.
func Ordinal(n int) string {
	suffix := "th"
	if n%100 < 11 || n%100 > 13 {
		switch n % 10 {
		case 1:
			suffix = "st"
		case 2:
			suffix = "nd"
		case 3:
			suffix = "rd"
		}
	}
	return strconv.Itoa(n) + suffix
}

// HighNeedsCores is why high priority with a quota of 0 is refused (the
// kernel module refuses it too).
const HighNeedsCores = "needs " + KeyCores + " above 0 on every card (a memory-only vGPU is never scheduled, so it has no priority); set " + KeyCores + ", or drop the priority"

// Error is an annotation that Parse refused. Its message names the key as
// written, the value and what is allowed.
type Error struct {
	Key    string // as written, e.g. gpuslice.io/gpu-cores/container.app
	Value  string // as written
	Reason string // what is wrong and what is allowed
}

func (e *Error) Error() string { return fmt.Sprintf("%s=%q: %s", e.Key, e.Value, e.Reason) }

func errorf(s Source, format string, a ...any) *Error {
	return &Error{Key: s.Key, Value: s.Value, Reason: fmt.Sprintf(format, a...)}
}

// Where a key was found.
const (
	fromPodContainer = iota // the pod's KEY/container.NAME
	fromCtrContainer        // the container's KEY/container.NAME
	fromCtr                 // the container's KEY
	fromPod                 // the pod's KEY
)

// lookup finds key for container name in NRI's order of precedence.
func lookup(pod map[string]string, name string, ctr map[string]string, key string) (Source, int, bool) {
	type place struct {
		m   map[string]string
		key string
	}
	places := []place{{pod, key + ContainerSuffix + name}, {ctr, key + ContainerSuffix + name}, {ctr, key}, {pod, key}}
	for from, p := range places {
		if name == "" && from <= fromCtrContainer {
			continue
		}
		if v, ok := p.m[p.key]; ok {
			return Source{Key: p.key, Value: v}, from, true
		}
	}
	return Source{}, 0, false
}

// checkKeys refuses unknown or malformed gpuslice.io/gpu-* keys meant for
// container name.
func checkKeys(m map[string]string, name string) error {
	ks := make([]string, 0, len(m))
	for k := range m {
		if strings.HasPrefix(k, KeyPrefix) {
			ks = append(ks, k)
		}
	}
	sort.Strings(ks)
	for _, k := range ks {
		s := Source{Key: k, Value: m[k]}
		base, suffix, scoped := strings.Cut(strings.TrimPrefix(k, KeyPrefix), "/")
		key := KeyPrefix + base
		if scoped {
			ctr, ok := strings.CutPrefix("/"+suffix, ContainerSuffix)
			if !ok || ctr == "" {
				return errorf(s, "not a key of gpuslice; want %s or %s%sNAME", key, key, ContainerSuffix)
			}
			if ctr != name {
				continue
			}
		}
		if !slices.Contains(Keys, key) {
			return errorf(s, "unknown annotation; the %s* keys are %s", KeyPrefix, strings.Join(Keys, ", "))
		}
	}
	return nil
}

// Parse reads the request of container name from the pod's annotations
// and the container's own (either map may be nil). It returns nil, nil when
// the container asks for nothing, and an *Error when an annotation is
// wrong.
func Parse(pod map[string]string, container string, ctr map[string]string) (*Request, error) {
	if err := checkKeys(pod, container); err != nil {
		return nil, err
	}
	if err := checkKeys(ctr, container); err != nil {
		return nil, err
	}
	mem, _, ok := lookup(pod, container, ctr, KeyMemory)
	if !ok {
		return nil, orphans(pod, container, ctr)
	}
	r := &Request{Sources: map[string]Source{KeyMemory: mem}}
	items, err := list(mem, "a size like 4Gi", "sizes like 4Gi,8Gi")
	if err != nil {
		return nil, err
	}
	if len(items) > MaxCards {
		return nil, errorf(mem, "%d cards; at most %d per container", len(items), MaxCards)
	}
	for i, it := range items {
		b, err := ParseMemory(it)
		if err != nil {
			return nil, errorf(mem, "%s%v", item(items, i), err)
		}
		r.Cards = append(r.Cards, CardRequest{MemoryBytes: b, Index: -1})
	}
	n := len(r.Cards)
	if s, _, ok := lookup(pod, container, ctr, KeyCores); ok {
		r.Sources[KeyCores] = s
		vals, err := perCard(s, mem, n, true, "a percent 0-100 in steps of 5", "percents 0-100 in steps of 5, like 30,50")
		if err != nil {
			return nil, err
		}
		for i := range r.Cards {
			j := min(i, len(vals)-1) // one value: every card's
			c, err := strconv.ParseUint(vals[j], 10, 32)
			if err != nil || c > MaxCores || c%CoresStep != 0 {
				return nil, errorf(s, "%swant a percent 0-100 in steps of 5", item(vals, j))
			}
			r.Cards[i].Cores = uint32(c)
		}
	}
	if s, _, ok := lookup(pod, container, ctr, KeyPriority); ok {
		r.Sources[KeyPriority] = s
		switch strings.ToLower(strings.TrimSpace(s.Value)) {
		case "low":
			r.Priority = Low
		case "high":
			r.Priority = High
		default:
			return nil, errorf(s, "want high or low")
		}
	}
	if s, _, ok := lookup(pod, container, ctr, KeyIndex); ok {
		r.Sources[KeyIndex] = s
		vals, err := perCard(s, mem, n, false, "a card index 0-31", "card indexes 0-31, like 0,1")
		if err != nil {
			return nil, err
		}
		seen := map[int]bool{}
		for i, v := range vals {
			x, err := strconv.Atoi(v)
			if err != nil || x < 0 || x > MaxIndex {
				return nil, errorf(s, "%swant a card index 0-%d", item(vals, i), MaxIndex)
			}
			if seen[x] {
				return nil, errorf(s, "card %d twice; pin each card of the request to a different index", x)
			}
			seen[x] = true
			r.Cards[i].Index = x
		}
	}
	if r.Priority == High {
		for _, c := range r.Cards {
			if c.Cores == 0 {
				return nil, errorf(r.Sources[KeyPriority], "%s", HighNeedsCores)
			}
		}
	}
	return r, nil
}

// orphans refuses the keys meant for a container that has no memory
// annotation: see the package comment.
func orphans(pod map[string]string, container string, ctr map[string]string) error {
	podNamesMemory := false
	for k := range pod {
		podNamesMemory = podNamesMemory || strings.HasPrefix(k, KeyMemory+ContainerSuffix)
	}
	for _, key := range Keys[1:] {
		s, from, ok := lookup(pod, container, ctr, key)
		if !ok || (from == fromPod && podNamesMemory) {
			continue
		}
		what := fmt.Sprintf("%s needs %s (the memory per card, e.g. 4Gi)", key, KeyMemory)
		if container != "" {
			what += fmt.Sprintf(" for container %q", container)
		}
		return errorf(s, "%s", what)
	}
	return nil
}

// list splits a comma-separated value; an empty item is an error.
func list(s Source, one, many string) ([]string, error) {
	items := splitList(s.Value)
	for i, it := range items {
		if it == "" {
			if len(items) == 1 {
				return nil, errorf(s, "empty; want %s", one)
			}
			return nil, errorf(s, "item %d is empty; want %s", i+1, many)
		}
	}
	return items, nil
}

func splitList(v string) []string {
	items := strings.Split(v, ",")
	for i := range items {
		items[i] = strings.TrimSpace(items[i])
	}
	return items
}

// perCard splits s into its values: n, one per card, or with broadcast
// also a single one for every card.
func perCard(s, mem Source, n int, broadcast bool, one, many string) ([]string, error) {
	vals, err := list(s, one, many)
	switch {
	case err != nil:
		return nil, err
	case len(vals) == n || (broadcast && len(vals) == 1):
		return vals, nil
	case broadcast:
		return nil, errorf(s, "%s for %s (%s); give one value for every card or one per card", count(len(vals), "value"), count(n, "card"), mem)
	}
	return nil, errorf(s, "%s for %s (%s); give one per card", count(len(vals), "value"), count(n, "card"), mem)
}

// item introduces an error about one value of a list.
func item(items []string, i int) string {
	if len(items) < 2 {
		return ""
	}
	return fmt.Sprintf("item %d (%q): ", i+1, items[i])
}

// count writes "1 card", "2 cards".
func count(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
