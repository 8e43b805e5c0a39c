package agent

// The DRA door. The kubelet prepares a claim (through nri-plugin/dra)
// before any container of its pod exists: the scheduler chose the cards
// and what the claim consumes of each, and the agent checks that against
// the cards as it knows them (the annotation route's vGPUs included),
// records the claim's vGPUs and gives the CDI spec its injection. Its
// containers come later through NRI, known by GPUSLICE_CLAIM (claimnri.go).

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gpuslice/gpuslice/pkg/placement"
	"github.com/gpuslice/gpuslice/pkg/quota"
	"github.com/gpuslice/gpuslice/pkg/state"
)

// ClaimRequest is a DRA claim's allocation as the agent prepares it.
type ClaimRequest struct {
	Claim state.Claim
	// Pod and PodUID are the pod the claim is reserved for, when known.
	Pod, PodUID string
	Priority    quota.Priority
	VGPUs       []ClaimVGPU // one per card, on distinct cards
}

// ClaimVGPU is what a claim consumes of one card.
type ClaimVGPU struct {
	Card        int
	MemoryBytes uint64
	Cores       uint32
	// Mode is the one the claim asked for (its parameters); placement.None
	// lets the card's policy decide: compute with cores, memory without.
	Mode    placement.Mode
	Request string // the claim's request
	ShareID string
}

// The fields of a claim the agent's refusals name.
const (
	fieldMemory   = "consumedCapacity.memory"
	fieldCores    = "consumedCapacity.cores"
	fieldPriority = "parameters.priority"
	fieldMode     = "parameters.mode"
	fieldDevice   = "device"
)

// PrepareClaim places a claim's vGPUs on the cards the scheduler chose,
// with the annotation route's checks, and records them; a claim already
// prepared (the kubelet asks again after its restart, or ours) answers
// from its record. A refusal wraps the *placement.Error when placement
// refused it.
func (a *Agent) PrepareClaim(req ClaimRequest) (state.Allocation, error) {
	key := state.ClaimKey(req.Claim.UID)
	a.mu.Lock()
	defer a.mu.Unlock()
	if al, ok := a.opts.Store.Get(key); ok {
		return al, a.restoreLedgerDir(al)
	}
	if err := a.guardRefusal(); err != nil {
		return state.Allocation{}, claimError(req.Claim, err)
	}
	if err := a.checkClaimModes(req); err != nil {
		return state.Allocation{}, claimError(req.Claim, err)
	}
	ps, err := placement.Place(a.cards, a.placed(), claimQuota(req), a.opts.Strategy)
	if err != nil {
		return state.Allocation{}, claimError(req.Claim, err)
	}
	claim := req.Claim
	al := state.Allocation{Container: key, Claim: &claim, Pod: req.Pod, PodUID: req.PodUID,
		Namespace: claim.Namespace, Enforce: a.opts.Enforce, Created: time.Now().UTC()}
	for i, p := range ps {
		v := req.VGPUs[i]
		al.VGPUs = append(al.VGPUs, state.VGPU{Card: p.Card, MemoryBytes: p.MemoryBytes, Cores: p.Cores,
			Priority: int(req.Priority), Mode: int(p.Mode), KmodID: -1, Request: v.Request, ShareID: v.ShareID})
	}
	if a.opts.Enforce == EnforceFile {
		if al.LedgerDir, err = a.makeLedgerDir(key); err != nil {
			return state.Allocation{}, claimError(req.Claim, err)
		}
	}
	if err := a.opts.Store.Put(al); err != nil {
		a.removeLedgerDir(al)
		return state.Allocation{}, claimError(req.Claim, err)
	}
	a.changed()
	return al, nil
}

// UnprepareClaim releases a claim's vGPUs (the module's, the ledger
// directory, the record); a claim not prepared is no error.
func (a *Agent) UnprepareClaim(uid string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if al, ok := a.opts.Store.Get(state.ClaimKey(uid)); ok {
		a.release(al)
	}
}

// Claim returns a prepared claim's record.
func (a *Agent) Claim(uid string) (state.Allocation, bool) {
	return a.opts.Store.Get(state.ClaimKey(uid))
}

// ClaimInjection is what every container of a prepared claim gets from
// its CDI device: the injection with the preload file (whatever the
// container's environment, without the agent's NRI side too), and the
// variables by which the NRI side knows the claim's containers.
func (a *Agent) ClaimInjection(al state.Allocation) (Injection, error) {
	if al.Claim == nil {
		return Injection{}, fmt.Errorf("allocation %s is not a claim's", al.Container)
	}
	if a.opts.Layout.PreloadHost == "" {
		return Injection{}, errors.New("no preload file: a claim's containers would run without the shim")
	}
	in, err := a.injection(al, true)
	if err != nil {
		return Injection{}, claimError(*al.Claim, err)
	}
	in.Env[EnvClaim] = al.Claim.UID
	in.Env[claimEnvKey(al.Claim.UID)] = al.Claim.UID
	return in, nil
}

// checkClaimModes refuses a mode asked for that the card's policy does
// not give (placement derives the mode from the policy and the cores).
func (a *Agent) checkClaimModes(req ClaimRequest) error {
	for _, v := range req.VGPUs {
		if v.Mode == placement.None {
			continue
		}
		asked := fmt.Sprintf("%s=%q with %s=\"%d\"", fieldMode, v.Mode, fieldCores, v.Cores)
		if v.Mode == placement.Memory && v.Cores > 0 {
			return fmt.Errorf("%s: a memory-only vGPU has no compute quota; drop the cores or the mode", asked)
		}
		c, ok := a.byIdx[v.Card]
		if !ok {
			continue // placement names the missing card
		}
		got, _ := placement.ModeOn(c.Policy, v.Cores)
		switch {
		case got == v.Mode:
		case v.Mode == placement.Compute:
			return fmt.Errorf("%s: a compute vGPU of quota 0 is the hybrid policy's (5); card %d runs policy %d (%s): ask for cores, or drop the mode",
				asked, c.Index, c.Policy, placement.PolicyName(c.Policy))
		default:
			return fmt.Errorf("%s: card %d runs policy %d (%s), whose vGPUs are all compute vGPUs; drop the mode",
				asked, c.Index, c.Policy, placement.PolicyName(c.Policy))
		}
	}
	return nil
}

// claimQuota is the claim as a placement request pinned to its cards,
// its values named by the claim's fields for the refusals.
func claimQuota(req ClaimRequest) *quota.Request {
	q := &quota.Request{Priority: req.Priority}
	var mem, cores, devs []string
	for _, v := range req.VGPUs {
		q.Cards = append(q.Cards, quota.CardRequest{MemoryBytes: v.MemoryBytes, Cores: v.Cores, Index: v.Card})
		mem = append(mem, quota.FormatMemory(v.MemoryBytes))
		cores = append(cores, strconv.FormatUint(uint64(v.Cores), 10))
		devs = append(devs, fmt.Sprintf("gpu-%d", v.Card))
	}
	q.Sources = map[string]quota.Source{
		quota.KeyMemory:   {Key: fieldMemory, Value: strings.Join(mem, ",")},
		quota.KeyCores:    {Key: fieldCores, Value: strings.Join(cores, ",")},
		quota.KeyPriority: {Key: fieldPriority, Value: req.Priority.String()},
		quota.KeyIndex:    {Key: fieldDevice, Value: strings.Join(devs, ",")},
	}
	return q
}

// claimError names the claim a refusal is about.
func claimError(c state.Claim, err error) error {
	return fmt.Errorf("claim %s/%s: %w", c.Namespace, c.Name, err)
}

// restoreLedgerDir recreates a recorded claim's ledger directory when it
// is gone (it lives under /run: a reboot empties it, the record stays).
func (a *Agent) restoreLedgerDir(al state.Allocation) error {
	if al.LedgerDir == "" {
		return nil
	}
	if _, err := os.Stat(al.LedgerDir); err == nil {
		return nil
	}
	_, err := a.makeLedgerDir(al.Container)
	return err
}

// CardModes is each card's isolation mode now, by index: that of its
// vGPUs (placement.None while it has none).
func (a *Agent) CardModes() map[int]placement.Mode {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[int]placement.Mode{}
	for idx, u := range placement.Usages(a.cards, a.placed()) {
		out[idx] = u.Mode
	}
	return out
}

// OnChange registers fn, called (with the agent's lock held: it must not
// call the agent) whenever a vGPU is recorded or released, by either door:
// the DRA driver republishes the cards' modes from it.
func (a *Agent) OnChange(fn func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.onChange = append(a.onChange, fn)
}

// changed calls the OnChange functions; a.mu held.
func (a *Agent) changed() {
	for _, fn := range a.onChange {
		fn()
	}
}
