# lbd in a container: build on Debian 12 with its DPDK, run with the host's
# hugepages and the NIC passed through, e.g.
#   docker run --privileged --network host -v /dev/hugepages:/dev/hugepages \
#     -v /sys/bus/pci:/sys/bus/pci -v /dev/vfio:/dev/vfio \
#     -v /etc/lbd:/etc/lbd -v /run/lbd:/run/lbd lbd --lcores 2-7 --pci 0000:03:00.0 --config /etc/lbd/lbd.toml
# and lbctl beside it: docker exec <container> lbctl info. The Kubernetes sync
# sidecar is in the same image: --entrypoint /usr/local/bin/lb-k8s-sync, with
# /run/lbd shared (README, "Kubernetes sync sidecar").
FROM debian:12 AS build
RUN apt-get update && apt-get install -y --no-install-recommends \
        ca-certificates curl build-essential pkg-config libdpdk-dev libclang-dev protobuf-compiler \
    && rm -rf /var/lib/apt/lists/*
RUN curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
ENV PATH=/root/.cargo/bin:$PATH
WORKDIR /src
COPY . .
RUN cargo build --release -p lbd -p lb-control -p lb-k8s-sync

FROM debian:12-slim
# The DPDK libraries lbd links (`ldd lbd`), the ring mempool driver, and the
# NIC drivers EAL loads at start: Debian's `dpdk` package only recommends
# them (its recommends are the common NIC drivers; ice is added for E810).
RUN apt-get update && apt-get install -y \
        dpdk librte-eal23 librte-ethdev23 librte-kvargs23 librte-mbuf23 librte-mempool23 \
        librte-meter23 librte-net23 librte-ring23 librte-telemetry23 librte-mempool-ring23 \
        librte-net-ice23 iproute2 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/lbd /src/target/release/lbctl /src/target/release/lb-k8s-sync /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/lbd"]
