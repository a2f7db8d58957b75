# syntax=docker/dockerfile:1
#
# The Tether image: the broker (the entrypoint) and the example handler, as
# static binaries on a distroless base that runs as non-root (65532).
#
#   docker build -t tether:dev .
#   docker run --rm tether:dev -help
#   docker run --rm --entrypoint /example-handler tether:dev -help
#
# Needs BuildKit (the default builder since Docker 23) for the cache mounts.
# Builds for the platform asked for (docker buildx build --platform
# linux/amd64,linux/arm64 ...) by cross-compiling on the build machine.

FROM --platform=$BUILDPLATFORM golang:1.27 AS build
WORKDIR /src

# Modules first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download

COPY . .
ARG TARGETOS
ARG TARGETARCH
ENV CGO_ENABLED=0
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
    go build -trimpath -buildvcs=false -ldflags="-s -w" -o /out/broker ./cmd/broker && \
    GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
    go build -trimpath -buildvcs=false -ldflags="-s -w" -o /out/example-handler ./cmd/example-handler

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/broker /broker
COPY --from=build /out/example-handler /example-handler
# nonroot:nonroot, numeric so that runAsNonRoot can verify it.
USER 65532:65532
# gRPC (TLS), admission webhooks (HTTPS), metrics and health (HTTP).
EXPOSE 7443 8443 9090
ENTRYPOINT ["/broker"]
