package policies

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// TailAudit is ReadAudit for a reader that asks often (the operator
// console polls it): it reads the log from its end, newest file first, and
// stops once it has n records of tenant (all tenants when "") or has read
// maxBytes, whichever comes first. So a console's refresh costs at most
// maxBytes of I/O however large the rotated log is; fewer than n records
// come back only when the last maxBytes hold fewer.
func TailAudit(path string, n int, tenant string, maxBytes int64) (recs []Record, skipped int, err error) {
	if n <= 0 || maxBytes <= 0 {
		return nil, 0, nil
	}
	files, err := auditFiles(path)
	if err != nil {
		return nil, 0, err
	}
	budget := maxBytes
	var chunks [][]Record // newest file first
	have := 0
	for i := len(files) - 1; i >= 0 && have < n && budget > 0; i-- {
		got, sk, used, err := tailFile(files[i], tenant, budget)
		if err != nil {
			return nil, skipped, err
		}
		skipped += sk
		budget -= used
		chunks = append(chunks, got)
		have += len(got)
	}
	out := make([]Record, 0, min(have, n))
	for i := len(chunks) - 1; i >= 0; i-- {
		out = append(out, chunks[i]...)
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return out, skipped, nil
}

// tailFile parses the records of tenant in the last budget bytes of file
// (whole lines only), oldest first, and says how many bytes it read.
func tailFile(file, tenant string, budget int64) ([]Record, int, int64, error) {
	f, err := os.Open(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, 0, nil // rotated away while we read
	}
	if err != nil {
		return nil, 0, 0, fmt.Errorf("audit: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, 0, fmt.Errorf("audit: %w", err)
	}
	start := max(fi.Size()-budget, 0)
	r := bufio.NewReaderSize(io.NewSectionReader(f, start, fi.Size()-start), maxAuditLine+1)
	if start > 0 {
		// The first line is cut: skip to the next whole one.
		for {
			_, err := r.ReadSlice('\n')
			if err == nil {
				break
			}
			if !errors.Is(err, bufio.ErrBufferFull) {
				return nil, 0, fi.Size() - start, nil // no whole line in budget
			}
		}
	}
	var out []Record
	skipped := 0
	long, err := eachLine(r, func(line []byte) {
		var rec Record
		if err := json.Unmarshal(line, &rec); err != nil {
			skipped++
			return
		}
		if tenant == "" || rec.Tenant == tenant {
			out = append(out, rec)
		}
	})
	skipped += long
	if err != nil {
		return nil, skipped, fi.Size() - start, fmt.Errorf("audit: %s: %w", file, err)
	}
	return out, skipped, fi.Size() - start, nil
}
