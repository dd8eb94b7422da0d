// cudaprobe uses the GPUs a container was given through the CUDA driver
// API, loaded at run time (no CUDA toolkit needed to build it): it lists
// the devices CUDA sees with their UUIDs, then on each one retains the
// primary context, allocates 1 MiB of device memory, fills it on the GPU
// (cuMemsetD8) and copies it back to check every byte. One line per
// device:
//
//	GPU-<uuid> <name>: memset 1048576 bytes ok
//
// Exit status: 0 when every device passed, 1 when a CUDA call failed, 2
// when libcuda.so.1 cannot be loaded (a container given no GPU).
//
// Built by hack/gpu-check/prepare.sh (gcc, dynamically linked against the
// C library; hack/gpu-check/bundle copies its loader and libraries into
// the container).
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;
typedef struct {
	unsigned char bytes[16];
} CUuuid;

static void *lib;

static void *sym(const char *name) {
	void *p = dlsym(lib, name);
	if (p == NULL) {
		fprintf(stderr, "cudaprobe: libcuda has no %s\n", name);
		exit(1);
	}
	return p;
}

static void check(CUresult r, const char *what) {
	if (r == 0) {
		return;
	}
	CUresult (*errorString)(CUresult, const char **) = sym("cuGetErrorString");
	const char *msg = "unknown error";
	errorString(r, &msg);
	fprintf(stderr, "cudaprobe: %s: %s (%d)\n", what, msg, r);
	exit(1);
}

int main(void) {
	lib = dlopen("libcuda.so.1", RTLD_NOW);
	if (lib == NULL) {
		fprintf(stderr, "cudaprobe: no CUDA driver: %s\n", dlerror());
		return 2;
	}
	CUresult (*init)(unsigned) = sym("cuInit");
	CUresult (*deviceCount)(int *) = sym("cuDeviceGetCount");
	CUresult (*deviceGet)(CUdevice *, int) = sym("cuDeviceGet");
	CUresult (*deviceName)(char *, int, CUdevice) = sym("cuDeviceGetName");
	CUresult (*deviceUUID)(CUuuid *, CUdevice) = sym("cuDeviceGetUuid");
	CUresult (*ctxRetain)(CUcontext *, CUdevice) = sym("cuDevicePrimaryCtxRetain");
	CUresult (*ctxRelease)(CUdevice) = sym("cuDevicePrimaryCtxRelease_v2");
	CUresult (*ctxSetCurrent)(CUcontext) = sym("cuCtxSetCurrent");
	CUresult (*memAlloc)(CUdeviceptr *, size_t) = sym("cuMemAlloc_v2");
	CUresult (*memFree)(CUdeviceptr) = sym("cuMemFree_v2");
	CUresult (*memset8)(CUdeviceptr, unsigned char, size_t) = sym("cuMemsetD8_v2");
	CUresult (*copyToHost)(void *, CUdeviceptr, size_t) = sym("cuMemcpyDtoH_v2");

	check(init(0), "cuInit");
	int n = 0;
	check(deviceCount(&n), "cuDeviceGetCount");
	printf("devices: %d\n", n);
	const size_t size = 1 << 20;
	unsigned char *host = malloc(size);
	if (host == NULL) {
		return 1;
	}
	for (int i = 0; i < n; i++) {
		CUdevice dev;
		char name[256];
		CUuuid u;
		check(deviceGet(&dev, i), "cuDeviceGet");
		check(deviceName(name, sizeof name, dev), "cuDeviceGetName");
		check(deviceUUID(&u, dev), "cuDeviceGetUuid");
		CUcontext ctx;
		check(ctxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
		check(ctxSetCurrent(ctx), "cuCtxSetCurrent");
		CUdeviceptr p;
		check(memAlloc(&p, size), "cuMemAlloc");
		check(memset8(p, 0xab, size), "cuMemsetD8");
		memset(host, 0, size);
		check(copyToHost(host, p, size), "cuMemcpyDtoH");
		check(memFree(p), "cuMemFree");
		check(ctxRelease(dev), "cuDevicePrimaryCtxRelease");
		for (size_t j = 0; j < size; j++) {
			if (host[j] != 0xab) {
				fprintf(stderr, "cudaprobe: device %d: byte %zu is 0x%02x, want 0xab\n", i, j, host[j]);
				return 1;
			}
		}
		const unsigned char *b = u.bytes;
		printf("GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x %s: memset %zu bytes ok\n",
		       b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15],
		       name, size);
	}
	free(host);
	return 0;
}
