/* Colour maps defined in CIELAB: lightness L* falls (or rises) linearly with the value, so equal
 * differences of weight read as equal differences of shade, and the hue path is chosen to stay
 * inside the sRGB gamut. */
#include "viz/viz_internal.h"

#include <math.h>

typedef struct lab_point {
    double t, l, a, b;
} lab_point;

/* White through a mid blue to a dark navy; the middle point bends the hue from cyan-ish blue
 * towards violet-blue at the dark end, as printed alignment figures usually look. */
static const lab_point blues[] = {
    {0.0, 98.0, -1.0, -3.0}, {0.5, 60.0, -8.0, -34.0}, {1.0, 22.0, 18.0, -44.0}};
static const lab_point greys[] = {{0.0, 0.0, 0.0, 0.0}, {1.0, 100.0, 0.0, 0.0}};

static double lab_f_inverse(double t)
{
    const double delta = 6.0 / 29.0;
    return t > delta ? t * t * t : 3.0 * delta * delta * (t - 4.0 / 29.0);
}

static unsigned char srgb_byte(double linear)
{
    double c = linear <= 0.0 ? 0.0 : linear >= 1.0 ? 1.0 : linear;
    double encoded = c <= 0.0031308 ? 12.92 * c : 1.055 * pow(c, 1.0 / 2.4) - 0.055;
    return (unsigned char)lround(encoded * 255.0);
}

/* CIELAB (D65 white) to 8-bit sRGB, clamping what falls outside the gamut. */
static viz_rgb lab_to_srgb(double l, double a, double b)
{
    double fy = (l + 16.0) / 116.0;
    double x = 0.95047 * lab_f_inverse(fy + a / 500.0);
    double y = 1.00000 * lab_f_inverse(fy);
    double z = 1.08883 * lab_f_inverse(fy - b / 200.0);
    viz_rgb c;
    c.r = srgb_byte(3.2404542 * x - 1.5371385 * y - 0.4985314 * z);
    c.g = srgb_byte(-0.9692660 * x + 1.8760108 * y + 0.0415560 * z);
    c.b = srgb_byte(0.0556434 * x - 0.2040259 * y + 1.0572252 * z);
    return c;
}

viz_rgb viz_colormap(attn_viz_colormap map, double t)
{
    const lab_point *points = map == ATTN_VIZ_GREYS ? greys : blues;
    size_t count = map == ATTN_VIZ_GREYS ? sizeof greys / sizeof greys[0]
                                         : sizeof blues / sizeof blues[0];
    if (!(t > 0.0))
        t = 0.0; /* also NaN */
    if (t > 1.0)
        t = 1.0;
    size_t segment = 0;
    while (segment + 2 < count && t > points[segment + 1].t)
        segment++;
    const lab_point *p0 = &points[segment], *p1 = &points[segment + 1];
    double u = (t - p0->t) / (p1->t - p0->t);
    return lab_to_srgb(p0->l + u * (p1->l - p0->l), p0->a + u * (p1->a - p0->a),
                       p0->b + u * (p1->b - p0->b));
}

attn_status attn_viz_colormap_rgb(attn_viz_colormap map, double t, unsigned char *rgb)
{
    ATTN_CHECK_NOT_NULL(rgb);
    ATTN_CHECK_ARG(map == ATTN_VIZ_BLUES || map == ATTN_VIZ_GREYS,
                   "attn_viz_colormap_rgb: unknown colour map %d", (int)map);
    viz_rgb c = viz_colormap(map, t);
    rgb[0] = c.r;
    rgb[1] = c.g;
    rgb[2] = c.b;
    return ATTN_OK;
}
