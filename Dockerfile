# The image the emitted Kubernetes Job runs (docs/sweep.md): offline-router
# alone, static, as the numeric user 65532. Build it from the repository's
# root and push it where the cluster pulls from, by a version tag:
#   docker build --build-arg VERSION=v1.2.0 -t registry.example.com/offline-router:v1.2.0 .
#   docker push registry.example.com/offline-router:v1.2.0
# Both bases are pinned by exact tag; pin them by digest too (FROM
# image:tag@sha256:...) where you build the image you push, since a
# registry may move a tag. No Docker engine runs in this repository's CI:
# internal/sweep's TestDockerfileMatchesTheJob checks this file against
# go.mod and the emitted manifest instead of building it.

FROM golang:1.26.8-trixie AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/offline-router ./cmd/offline-router

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/offline-router /usr/local/bin/offline-router
# Numeric, as the Job's runAsUser and runAsGroup (sweep.KubeUser), so the
# kubelet can check runAsNonRoot before it starts the container.
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/offline-router"]
