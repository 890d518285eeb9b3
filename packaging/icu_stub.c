/* An ICU data library with no data, like ICU's own "stubdata" library.
 *
 * Qt's Core links ICU only for locale-aware collation (QCollator), time-zone display names and
 * non-UTF codecs; everything else (text layout, line breaking, case mapping, QLocale formats)
 * is Qt's own or built into libicuuc. Those few calls find no data and Qt falls back (plain
 * comparison, the zone id, UTF codecs), which the English UI never notices; the bundle saves
 * the 32 MB data library. Built by packaging/spec_config.py on Linux:
 *     cc -shared -fPIC -DICU_DATA_SYMBOL=icudt73_dat -Wl,-soname,libicudata.so.73 \
 *        -o libicudata.so.73 icu_stub.c
 */
#include <stdint.h>

#ifndef ICU_DATA_SYMBOL
#error "build with -DICU_DATA_SYMBOL=icudt<major>_dat, e.g. icudt73_dat"
#endif

/* The common-data header ICU checks (udata.cpp): header size 32, magic 0xda 0x27, a UDataInfo
 * for a little- or big-endian table of contents ("ToCP" version 1) and an entry count of 0. */
struct icu_data_header {
    uint16_t header_size;
    uint8_t magic1, magic2;
    uint16_t info_size, info_reserved;
    uint8_t is_big_endian, charset_family, sizeof_uchar, info_reserved_byte;
    uint8_t data_format[4], format_version[4], data_version[4];
    uint8_t padding[8];
    uint32_t count, reserved;
    uint32_t empty_entry[4]; /* no entries (count is 0); one blank one, as ICU's stub has */
};

__attribute__((visibility("default")))
const struct icu_data_header ICU_DATA_SYMBOL = {
    32, 0xda, 0x27,
    20, 0,
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    1,
#else
    0,
#endif
    0 /* ASCII family */, 2 /* sizeof(UChar) */, 0,
    {0x54, 0x6f, 0x43, 0x50}, {1, 0, 0, 0}, {0, 0, 0, 0},
    {0, 0, 0, 0, 0, 0, 0, 0},
    0, 0,
    {0, 0, 0, 0},
};
