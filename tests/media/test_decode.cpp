// Decoding checked byte for byte against PIL 9.4's Image.open(f).convert("RGB") on images made
// from skimage's photographs (JPEG, PNG and WebP in every layout PIL opens), and the errors for
// broken, oversized and unsupported input.
#include <gtest/gtest.h>

#include <string>

#include "../common/error_of.h"
#include "core/error.h"
#include "media/image.h"
#include "media_test_util.h"

using namespace mmrt;
using namespace mmrt::media;
using namespace media_test;

TEST(MediaDecode, DetectsFormatsByMagicBytes) {
  auto fmt = [](const std::string& s) {
    return detect_format(std::span(reinterpret_cast<const uint8_t*>(s.data()), s.size()));
  };
  EXPECT_EQ(fmt(std::string("\xff\xd8\xff\xe0", 4)), ImageFormat::kJpeg);
  EXPECT_EQ(fmt(std::string("\x89PNG\r\n\x1a\n....", 12)), ImageFormat::kPng);
  EXPECT_EQ(fmt(std::string("RIFF\x10\0\0\0WEBPVP8 ", 16)), ImageFormat::kWebp);
  EXPECT_EQ(fmt("GIF89a......"), ImageFormat::kGif);
  EXPECT_EQ(fmt(std::string("RIFF\x10\0\0\0WAVEfmt ", 16)), ImageFormat::kUnknown);
  EXPECT_EQ(fmt("<html>"), ImageFormat::kUnknown);
}

TEST(MediaDecode, IdenticalToPilForEveryFile) {
  MEDIA_REF_OR_FAIL(ref);
  int n = 0;
  for (const auto& c : ref.manifest["decode"]) {
    const std::string file = c["file"];
    SCOPED_TRACE(file + " (PIL mode " + c["mode"].get<std::string>() + ")");
    std::vector<uint8_t> bytes = read_bytes(ref.dir / file);
    Tensor want = read_npy((ref.dir / c["expect"].get<std::string>()).string());
    Image got;
    try {
      got = decode_image(bytes);
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
      continue;
    }
    EXPECT_TRUE(same_pixels(got, want));
    ImageInfo info = probe_image(bytes);
    EXPECT_EQ(info.width, got.width());
    EXPECT_EQ(info.height, got.height());
    ++n;
  }
  EXPECT_GE(n, 30);
}

TEST(MediaDecode, ReportsColourModelFromHeader) {
  MEDIA_REF_OR_FAIL(ref);
  auto info = [&](const char* f) { return probe_image(read_bytes(ref.dir / "img" / f)); };
  EXPECT_EQ(info("chelsea_q95_444.jpg").color, "YCbCr 4:4:4");
  EXPECT_EQ(info("chelsea_q75_422.jpg").color, "YCbCr 4:2:2");
  EXPECT_EQ(info("chelsea_q50_420.jpg").color, "YCbCr 4:2:0");
  EXPECT_EQ(info("chelsea_cmyk.jpg").color, "CMYK");
  EXPECT_EQ(info("camera_gray.jpg").color, "L");
  EXPECT_EQ(info("rgb16.png").color, "RGB 16-bit");
  EXPECT_EQ(info("chelsea_lossless_alpha.webp").color, "lossless+alpha");
  ImageInfo i = info("chelsea_q50_420.jpg");
  EXPECT_EQ(i.format, ImageFormat::kJpeg);
  EXPECT_EQ(i.width, 451);
  EXPECT_EQ(i.height, 300);
}

// Each broken file PIL also refuses gives a FormatError naming the problem; the process stays
// healthy and decodes the next good file.
TEST(MediaDecode, BrokenFilesGiveClearErrors) {
  MEDIA_REF_OR_FAIL(ref);
  int n = 0;
  for (const auto& c : ref.manifest["errors"]) {
    const std::string file = c["file"], kind = c["kind"];
    SCOPED_TRACE(file + ": PIL says " + c["pil"].get<std::string>());
    EXPECT_NE(c["pil"].get<std::string>(), "ok") << "PIL should refuse this file too";
    std::vector<uint8_t> bytes = read_bytes(ref.dir / file);
    std::string fmt = file.substr(file.rfind('.') + 1);
    std::string prefix = kind + " " + (fmt == "jpg" ? "JPEG" : fmt == "png" ? "PNG" : "WebP");
    try {
      decode_image(bytes);
      ADD_FAILURE() << "no error";
    } catch (const FormatError& e) {
      EXPECT_EQ(std::string(e.what()).rfind(prefix, 0), 0u) << e.what();
    }
    ++n;
  }
  EXPECT_EQ(n, 6);
  Image ok = decode_image(read_bytes(ref.dir / "img" / "chelsea_q75_422.jpg"));
  EXPECT_EQ(ok.width(), 451);
}

TEST(MediaDecode, OversizedHeaderRefusedBeforeDecoding) {
  MEDIA_REF_OR_FAIL(ref);
  for (const char* f : {"bomb.png", "bomb.jpg"}) {
    SCOPED_TRACE(f);
    std::vector<uint8_t> bytes = read_bytes(ref.dir / "img" / f);
    try {
      decode_image(bytes);
      ADD_FAILURE() << "no error";
    } catch (const ResourceExhausted& e) {
      EXPECT_NE(std::string(e.what()).find("image is 30000x30000 = 900.0 Mpixel, above the limit"),
                std::string::npos)
          << e.what();
    }
    EXPECT_THROW(probe_image(bytes), ResourceExhausted);
  }
  // The limit is configurable: a 451 x 300 photo against a 100 000-pixel limit.
  std::vector<uint8_t> small = read_bytes(ref.dir / "img" / "chelsea_q75_422.jpg");
  EXPECT_THROW(decode_image(small, {.max_pixels = 100000}), ResourceExhausted);
  EXPECT_NO_THROW(decode_image(small, {.max_pixels = 451 * 300}));
}

TEST(MediaDecode, ZeroSizeEmptyUnknownAndUnsupportedInputs) {
  MEDIA_REF_OR_FAIL(ref);
  try {
    decode_image(read_bytes(ref.dir / "img" / "zero_width.png"));
    ADD_FAILURE() << "no error";
  } catch (const FormatError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("corrupt PNG", 0), 0u) << e.what();
  }
  std::vector<uint8_t> none;
  EXPECT_THROW(decode_image(none), InvalidArgument);
  auto decode_text = [](const std::string& bytes) {
    return [bytes] {
      decode_image(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
    };
  };
  using mmrt::testing::error_of;
  EXPECT_EQ(error_of<Unimplemented>(decode_text("GIF89a\x01\x00\x01\x00\x00\x00\x00;")),
            "unsupported image format GIF: mmrt decodes JPEG, PNG and WebP");
  EXPECT_EQ(error_of<FormatError>(decode_text("hello, this is not an image")),
            "unrecognised image data: expected a JPEG, PNG or WebP file");
  // A video or audio file given as an image is named, and its bytes are never quoted; HEIF
  // (an image format mmrt does not decode) is told apart from MP4 by its ftyp brand.
  EXPECT_EQ(error_of<FormatError>(decode_text(std::string("\0\0\0\x20"
                                                          "ftypisom"
                                                          "\0\0\x02\0"
                                                          "isomiso2mp41",
                                                          24))),
            "unrecognised image data: expected a JPEG, PNG or WebP file: the data is an "
            "MP4/QuickTime video (send it as a video part)");
  EXPECT_EQ(error_of<Unimplemented>(decode_text(std::string("\0\0\0\x18"
                                                            "ftypheic"
                                                            "\0\0\0\0"
                                                            "mif1heic",
                                                            24))),
            "unsupported image format HEIF/AVIF: mmrt decodes JPEG, PNG and WebP");
}

TEST(MediaDecode, FastModeScaledJpegDecode) {
  MEDIA_REF_OR_FAIL(ref);
  std::vector<uint8_t> bytes = read_bytes(ref.dir / "img" / "big_1000x800.jpg");
  // Target 300x200: 1000 >= 2*300 and 800 >= 2*200 but 1000 < 4*300 -> 1/2 scale.
  EXPECT_EQ(jpeg_scale_denominator(1000, 800, 300, 200), 2);
  EXPECT_EQ(jpeg_scale_denominator(1000, 800, 100, 100), 8);
  EXPECT_EQ(jpeg_scale_denominator(1000, 800, 501, 100), 1);
  EXPECT_EQ(jpeg_scale_denominator(1000, 800, 0, 0), 1);
  Image half = decode_image(
      bytes, {.mode = PreprocessMode::kFast, .target_width = 300, .target_height = 200});
  EXPECT_EQ(half.width(), 500);
  EXPECT_EQ(half.height(), 400);
  Image eighth = decode_image(
      bytes, {.mode = PreprocessMode::kFast, .target_width = 100, .target_height = 90});
  EXPECT_EQ(eighth.width(), 125);
  EXPECT_EQ(eighth.height(), 100);
  // Reference mode ignores the target.
  Image full = decode_image(bytes, {.target_width = 100, .target_height = 90});
  EXPECT_EQ(full.width(), 1000);
}
