package quota

import (
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
)

// The binary suffixes of a memory size.
var memUnits = []struct {
	suffix string
	shift  uint
}{{"Ki", 10}, {"Mi", 20}, {"Gi", 30}, {"Ti", 40}}

const wantSize = "want a size like 4Gi, 4096Mi, 1.5Gi or a number of bytes (suffixes Ki, Mi, Gi, Ti)"

// ParseMemory reads one memory size: a number with an optional binary
// suffix (Ki, Mi, Gi, Ti; a fraction such as 1.5Gi is allowed when the
// result is whole), or a whole number of bytes. The size must be a whole
// number of MiB, MinMemory to MaxMemory. The error says what is wrong
// without naming the annotation.
func ParseMemory(s string) (uint64, error) {
	num, shift := s, uint(0)
	for _, u := range memUnits {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, shift = n, u.shift
			break
		}
	}
	intPart, frac, dotted := strings.Cut(num, ".")
	if !digits(intPart) || (dotted && (!digits(frac) || shift == 0)) {
		return 0, errors.New(hintSize(s))
	}
	// value = (intPart.frac) << shift, exactly.
	v, _ := new(big.Rat).SetString(num)
	v.Mul(v, new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), shift)))
	if v.Cmp(big.NewRat(MaxMemory, 1)) > 0 {
		return 0, fmt.Errorf("want at most %s", FormatMemory(MaxMemory))
	}
	mibs := new(big.Rat).Quo(v, big.NewRat(mib, 1))
	if !mibs.IsInt() {
		lo := new(big.Int).Quo(mibs.Num(), mibs.Denom()).Uint64()
		if lo == 0 {
			return 0, fmt.Errorf("want at least 1Mi")
		}
		return 0, fmt.Errorf("not a whole number of MiB (between %d and %d MiB); want whole MiB, e.g. %dMi", lo, lo+1, lo)
	}
	b := mibs.Num().Uint64() * mib
	if b < MinMemory {
		return 0, fmt.Errorf("want at least 1Mi")
	}
	return b, nil
}

// digits reports whether s is a non-empty run of ASCII digits.
func digits(s string) bool {
	if s == "" || len(s) > 20 {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// hintSize explains a size that is not one, pointing at the usual mistakes.
func hintSize(s string) string {
	t := strings.TrimLeft(s, "0123456789.")
	if t != s && t != "" {
		switch strings.ToUpper(t) {
		case "K", "M", "G", "T", "KB", "MB", "GB", "TB":
			return fmt.Sprintf("%s is a decimal unit; %s", t, wantSize)
		case "KIB", "MIB", "GIB", "TIB":
			return fmt.Sprintf("write %s, not %s; %s", t[:2], t, wantSize)
		}
	}
	return wantSize
}

// FormatMemory writes a size the way ParseMemory reads it, in the largest
// binary unit that keeps it whole: 4Gi, 1536Mi, 1Ti, 1000 (bytes).
func FormatMemory(b uint64) string {
	for i := len(memUnits) - 1; i >= 0; i-- {
		u := memUnits[i]
		if b != 0 && b%(1<<u.shift) == 0 {
			return strconv.FormatUint(b>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatUint(b, 10)
}
