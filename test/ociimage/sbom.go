package ociimage

import (
	"bytes"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"
)

// The SBOM of an image: an SPDX 2.3 document (JSON) naming each binary and,
// from the build information Go records in it, the Go toolchain and every
// module linked in, with a package URL that vulnerability scanners (grype,
// trivy, osv-scanner) match on. Like the image, it depends only on the
// binaries: no clock, no host.

// spdxDoc is the part of SPDX 2.3 the SBOM uses.
type spdxDoc struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreation       `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreation struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	Name             string    `json:"name"`
	SPDXID           string    `json:"SPDXID"`
	VersionInfo      string    `json:"versionInfo,omitempty"`
	DownloadLocation string    `json:"downloadLocation"`
	FilesAnalyzed    bool      `json:"filesAnalyzed"`
	PrimaryPurpose   string    `json:"primaryPackagePurpose,omitempty"`
	ExternalRefs     []spdxRef `json:"externalRefs,omitempty"`
}

type spdxRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

// notID is what an SPDX identifier may not hold.
var notID = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

func spdxID(kind, name string) string {
	return "SPDXRef-" + kind + "-" + strings.Trim(notID.ReplaceAllString(name, "-"), "-")
}

// SBOM is the SPDX document of the image named ref, whose digest is
// digest, holding files: each binary with Go build information is a package
// of version (what the binaries were stamped with, Describe's; empty: not
// said) that contains the Go standard library of its toolchain and the
// modules it was built with.
func SBOM(ref, digest, version string, files []File) ([]byte, error) {
	doc := spdxDoc{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT", Name: ref,
		// Unique per image, as SPDX asks, and the same for the same image.
		DocumentNamespace: "https://tether.dev/spdx/" + strings.ReplaceAll(ref, ":", "/") + "/" + digest,
		CreationInfo:      spdxCreation{Created: epoch.Format("2006-01-02T15:04:05Z"), Creators: []string{"Tool: tether-image"}},
	}
	seen := map[string]bool{}
	for _, f := range files {
		info, err := buildinfo.Read(bytes.NewReader(f.Data))
		if err != nil {
			continue // not a Go binary: passwd, group
		}
		bin := spdxPackage{Name: f.Path, SPDXID: spdxID("Binary", path.Base(f.Path)), VersionInfo: version,
			DownloadLocation: "NOASSERTION", PrimaryPurpose: "APPLICATION"}
		doc.Packages = append(doc.Packages, bin)
		doc.Relationships = append(doc.Relationships, spdxRelationship{"SPDXRef-DOCUMENT", "DESCRIBES", bin.SPDXID})
		mods := []spdxPackage{goModule("stdlib", info.GoVersion)}
		for _, m := range info.Deps {
			if m.Replace != nil {
				m = m.Replace
			}
			mods = append(mods, goModule(m.Path, m.Version))
		}
		for _, m := range mods {
			if !seen[m.SPDXID] {
				seen[m.SPDXID] = true
				doc.Packages = append(doc.Packages, m)
			}
			doc.Relationships = append(doc.Relationships, spdxRelationship{bin.SPDXID, "CONTAINS", m.SPDXID})
		}
	}
	if len(seen) == 0 {
		return nil, fmt.Errorf("no Go binary among the image's %d files", len(files))
	}
	slices.SortStableFunc(doc.Packages, func(a, b spdxPackage) int { return strings.Compare(a.SPDXID, b.SPDXID) })
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding the SBOM: %w", err)
	}
	return append(out, '\n'), nil
}

// goModule is the package of a Go module at version; stdlib is the
// standard library of the toolchain version ("go1.26.8"), which scanners
// know by the version without "go".
func goModule(module, version string) spdxPackage {
	if module == "stdlib" {
		version = strings.TrimPrefix(version, "go")
	}
	id := spdxID("Go", module+"@"+version)
	return spdxPackage{Name: module, SPDXID: id, VersionInfo: version, DownloadLocation: "NOASSERTION",
		PrimaryPurpose: "LIBRARY",
		ExternalRefs:   []spdxRef{{Category: "PACKAGE-MANAGER", Type: "purl", Locator: "pkg:golang/" + module + "@" + version}}}
}
