#include "driver/dpdk/telemetry.h"

#include <rte_telemetry.h>

#include <cerrno>
#include <map>
#include <mutex>

#include "absl/strings/str_cat.h"

namespace bypass::driver::dpdk {
namespace {

// The handlers by command: rte_telemetry's callbacks carry no argument, so
// one dispatcher finds them by the command it is called for.
struct Commands {
  std::mutex mu;
  std::map<std::string, TelemetryHandler, std::less<>> handlers;
  std::vector<std::string> order;
};

Commands& TheCommands() {
  static Commands* c = new Commands;  // never destroyed: DPDK's thread may call late
  return *c;
}

std::string JsonString(std::string_view s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      absl::StrAppend(&out, "\\u00", absl::Hex(static_cast<unsigned char>(ch), absl::kZeroPad2));
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

template <typename T, typename F>
std::string JsonArray(const std::vector<T>& v, F one) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) absl::StrAppend(&out, i > 0 ? ", " : "", one(v[i]));
  return out + "]";
}

// Copies the dict into DPDK's structure (arrays as containers it frees).
int ToTelData(const TelemetryDict& d, rte_tel_data* out) {
  rte_tel_data_start_dict(out);
  for (const auto& [name, value] : d.entries()) {
    int rc = 0;
    if (const auto* u = std::get_if<uint64_t>(&value)) {
      rc = rte_tel_data_add_dict_u64(out, name.c_str(), *u);
    } else if (const auto* s = std::get_if<std::string>(&value)) {
      rc = rte_tel_data_add_dict_string(out, name.c_str(), s->c_str());
    } else {
      rte_tel_data* array = rte_tel_data_alloc();
      if (array == nullptr) return -ENOMEM;
      if (const auto* us = std::get_if<std::vector<uint64_t>>(&value)) {
        rte_tel_data_start_array(array, RTE_TEL_U64_VAL);
        for (uint64_t x : *us) rte_tel_data_add_array_u64(array, x);
      } else {
        rte_tel_data_start_array(array, RTE_TEL_STRING_VAL);
        for (const std::string& x : std::get<std::vector<std::string>>(value)) {
          rte_tel_data_add_array_string(array, x.c_str());
        }
      }
      rc = rte_tel_data_add_dict_container(out, name.c_str(), array, 0);
      if (rc != 0) rte_tel_data_free(array);
    }
    if (rc != 0) return rc;
  }
  return 0;
}

// Runs the handler registered for cmd (false: none).
bool Run(std::string_view cmd, std::string_view params, TelemetryDict* d, absl::Status* status) {
  TelemetryHandler handler;
  {
    Commands& c = TheCommands();
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.handlers.find(cmd);
    if (it == c.handlers.end()) return false;
    handler = it->second;
  }
  *status = handler(params, d);
  return true;
}

int Dispatch(const char* cmd, const char* params, rte_tel_data* out) {
  TelemetryDict d;
  absl::Status status;
  if (!Run(cmd, params == nullptr ? "" : params, &d, &status)) return -ENOENT;
  if (!status.ok()) return -EINVAL;  // DPDK answers {"cmd": null}
  return ToTelData(d, out);
}

}  // namespace

void TelemetryDict::Add(std::string name, Value v) {
  entries_.emplace_back(std::move(name), std::move(v));
}

std::string TelemetryDict::ToJson() const {
  std::string out = "{";
  bool first = true;
  for (const auto& [name, value] : entries_) {
    absl::StrAppend(&out, first ? "" : ", ", JsonString(name), ": ");
    first = false;
    if (const auto* u = std::get_if<uint64_t>(&value)) {
      absl::StrAppend(&out, *u);
    } else if (const auto* s = std::get_if<std::string>(&value)) {
      out += JsonString(*s);
    } else if (const auto* us = std::get_if<std::vector<uint64_t>>(&value)) {
      out += JsonArray(*us, [](uint64_t x) { return absl::StrCat(x); });
    } else {
      out += JsonArray(std::get<std::vector<std::string>>(value), JsonString);
    }
  }
  return out + "}";
}

absl::Status RegisterTelemetryCommand(const std::string& cmd, const std::string& help,
                                      TelemetryHandler handler) {
  Commands& c = TheCommands();
  std::lock_guard<std::mutex> lock(c.mu);
  if (auto it = c.handlers.find(cmd); it != c.handlers.end()) {
    it->second = std::move(handler);
    return absl::OkStatus();
  }
  const int rc = rte_telemetry_register_cmd(cmd.c_str(), Dispatch, help.c_str());
  if (rc == -EINVAL) {
    return absl::InvalidArgumentError(absl::StrCat(
        "telemetry: DPDK refuses the command name '", cmd,
        "' (a '/' first, then letters, digits, '_' and '/'; help under 128 bytes)"));
  }
  if (rc != 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("telemetry: DPDK could not register '", cmd, "' (error ", -rc, ")"));
  }
  c.handlers.emplace(cmd, std::move(handler));
  c.order.push_back(cmd);
  return absl::OkStatus();
}

absl::Status AnswerTelemetryCommand(std::string_view cmd, std::string_view params,
                                    std::string* json) {
  TelemetryDict d;
  absl::Status status;
  if (!Run(cmd, params, &d, &status)) {
    return absl::NotFoundError(absl::StrCat("telemetry: no command ", std::string(cmd)));
  }
  *json = absl::StrCat("{", JsonString(cmd), ": ", status.ok() ? d.ToJson() : std::string("null"), "}");
  return absl::OkStatus();
}

std::vector<std::string> TelemetryCommands() {
  Commands& c = TheCommands();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.order;
}

}  // namespace bypass::driver::dpdk
